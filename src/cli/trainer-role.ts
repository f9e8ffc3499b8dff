/** `platform trainer`: the fine-tuning trainer as a role of its own (docs/fine-tuning.md), for clusters. */
import type { Command } from "commander";
import { loadSettings } from "../settings/index.ts";
import { CliError } from "./common/errors.ts";
import { wholeNumber } from "./common/flags.ts";

export function registerTrainerRole(program: Command): void {
  program
    .command("trainer")
    .description("run a fine-tuning trainer alone (needs REDIS_URL and the Python stack: torch, transformers, peft)")
    .option("--jobs <n>", "fine-tuning jobs this process trains at once", wholeNumber(1, 64), 1)
    .option("--threads <n>", "CPU threads torch uses per job", wholeNumber(1, 1024), 1)
    .option(
      "--gpu",
      "offer a GPU: also take jobs that ask for one (resources.gpu); refuses to start unless the trainer's torch sees a GPU",
    )
    .option(
      "--health-port <port>",
      "serve /livez, /readyz and /metrics on this port, as a worker does (0: any free port, printed)",
      wholeNumber(0, 65535),
    )
    .action(async (opts: { jobs: number; threads: number; gpu?: boolean; healthPort?: number }) => {
      const { jobs, threads } = opts;
      if (!loadSettings().redisUrl)
        throw new CliError("REDIS_URL is not set; the trainer needs the platform's Redis", 2);
      const { runTrainerProcess } = await import("../../workers/trainer/main.ts");
      const { NoGpuError } = await import("../../workers/trainer/coordinator.ts");
      try {
        await runTrainerProcess({ jobs, threads, gpu: opts.gpu === true, healthPort: opts.healthPort });
      } catch (e) {
        if (e instanceof NoGpuError) throw new CliError(e.message, 1);
        throw e;
      }
    });
}
