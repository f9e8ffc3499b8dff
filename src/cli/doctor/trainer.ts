/**
 * Doctor's fine-tuning check: the Python the trainer runs (PLATFORM_TRAINER_PYTHON, else the repo's
 * .venv-ref, else python3) imports torch, transformers and peft. Not required: a machine that never
 * trains (a gateway, a client) has no use for them.
 */
import { TRAINER_PYTHON_FIX } from "../../settings/finetuning.ts";
import { loadSettings } from "../../settings/index.ts";
import { type DoctorCheck, fail, ok } from "./check.ts";

const PROBE =
  "import torch, transformers, peft; print(torch.__version__, transformers.__version__, peft.__version__, torch.cuda.is_available())";

export const trainerCheck: DoctorCheck = {
  id: "trainer",
  name: "Fine-tuning trainer",
  required: false,
  run: async (ctx) => {
    const python = loadSettings().fineTuning.python;
    const fix = TRAINER_PYTHON_FIX;
    const res = await ctx.exec(python, ["-c", PROBE]);
    if (!res) return fail(`${python}: not found`, fix);
    if (res.code !== 0) {
      const missing = /No module named '([^']+)'/.exec(res.stderr)?.[1];
      return fail(`${python} cannot import ${missing ?? "torch, transformers and peft"}`, fix);
    }
    const [torch, transformers, peft, cuda] = res.stdout.trim().split(/\s+/);
    return ok(
      `torch ${torch}, transformers ${transformers}, peft ${peft}${cuda === "True" ? ", CUDA available" : ", CPU only"}`,
      {
        python,
        torch,
        transformers,
        peft,
        cuda: cuda === "True",
      },
    );
  },
};
