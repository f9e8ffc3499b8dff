/** The trainer role (`platform trainer`): trains fine-tuning jobs from the queue until SIGTERM (clusters). */
import type { Server } from "node:http";
import { connectControl } from "../../src/redis/connection.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { startTrainer } from "./coordinator.ts";
import { probeGpu } from "./gpu.ts";

/** `healthPort`: serve /livez, /readyz and /metrics there (0: any free port, printed). */
export async function runTrainerProcess(
  options: { jobs?: number; threads?: number; gpu?: boolean; healthPort?: number } = {},
): Promise<void> {
  const settings = loadSettings();
  if (!settings.redisUrl) throw new Error("REDIS_URL is not set; a trainer needs the platform's Redis");
  const ctl = connectControl(settings.redisUrl, settings.prefix);
  // Loaded only when asked for: prom-client costs memory a trainer without a port is spared.
  const health =
    options.healthPort === undefined
      ? undefined
      : new (await import("./health.ts")).TrainerHealth(() => ctl.redis.status === "ready");
  let trainer: Awaited<ReturnType<typeof startTrainer>>;
  let server: Server | undefined;
  try {
    trainer = await startTrainer(ctl, settings, {
      jobsPerProcess: options.jobs,
      threads: options.threads,
      gpu: options.gpu ?? false,
      health,
    });
    if (health && options.healthPort !== undefined) {
      const serving = await health.serve(options.healthPort);
      server = serving.server;
      console.log(`trainer: /livez, /readyz and /metrics on port ${serving.port}`);
    }
  } catch (e) {
    await ctl.redis.quit().catch(() => undefined);
    throw e;
  }
  const gpu = await trainer.offersGpu;
  console.log(`trainer: waiting for fine-tuning jobs${gpu ? " (CPU and GPU)" : " (CPU only)"}`);
  // A GPU machine running a CPU-only trainer is likely a missing flag: say so (not waited for).
  if (!options.gpu)
    void probeGpu(settings.fineTuning.python).then((seen) => {
      if (seen.cuda)
        console.log(
          `trainer: torch sees a GPU (${seen.name ?? "CUDA"}), but without --gpu this trainer takes CPU jobs only`,
        );
    });
  const stop = async () => {
    // Running jobs go back to the queue; the next trainer resumes them from their checkpoints.
    await trainer.stop();
    server?.close();
    await ctl.redis.quit().catch(() => undefined);
    process.exit(0);
  };
  process.once("SIGTERM", () => void stop());
  process.once("SIGINT", () => void stop());
}
