/**
 * Whether this trainer offers a GPU: asked of the trainer's own Python (probe.py: does its torch
 * see CUDA?), since that is what trains. `platform trainer --gpu` must; `platform up` asks and says.
 */
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { TRAINER_PYTHON_FIX } from "../../src/settings/finetuning.ts";

export const PROBE_SCRIPT = fileURLToPath(new URL("./probe.py", import.meta.url));

export type GpuProbe = { torch: string | null; cuda: boolean; devices: number; name: string | null };

export function probeGpu(python: string): Promise<GpuProbe> {
  return new Promise((resolve) => {
    execFile(python, [PROBE_SCRIPT], { timeout: 120_000, encoding: "utf8" }, (error, stdout) => {
      const none: GpuProbe = { torch: null, cuda: false, devices: 0, name: null };
      if (error) return resolve(none);
      try {
        const parsed = JSON.parse(stdout.trim().split("\n").at(-1) ?? "") as Partial<GpuProbe>;
        resolve({
          torch: typeof parsed.torch === "string" ? parsed.torch : null,
          cuda: parsed.cuda === true,
          devices: Number(parsed.devices ?? 0) || 0,
          name: typeof parsed.name === "string" ? parsed.name : null,
        });
      } catch {
        resolve(none);
      }
    });
  });
}

/** The line a trainer prints about what it offers (and, without a GPU, where GPU jobs go). */
export function describeOffer(probe: GpuProbe, offersGpu: boolean): string {
  if (offersGpu) return `trainer: offers a GPU (${probe.name ?? "CUDA"}, torch ${probe.torch}): takes GPU and CPU jobs`;
  if (probe.torch === null)
    return `trainer: the trainer's Python has no torch: ${TRAINER_PYTHON_FIX} (\`platform doctor\` checks it); jobs fail until it does`;
  return `trainer: torch ${probe.torch} sees no GPU: CPU jobs only; jobs with resources.gpu wait for a trainer that offers one (\`platform trainer --gpu\` on a GPU machine)`;
}
