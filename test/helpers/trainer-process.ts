/**
 * A fine-tuning trainer alone in its own process, so tests can SIGKILL it mid-job. Environment:
 * REDIS_URL, PLATFORM_DATA_DIR, PLATFORM_TRAINER_PYTHON, and TRAINER_LOCK_MS / TRAINER_STALLED_MS to
 * make recovery fast.
 */
import { connectControl } from "../../src/redis/connection.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { startTrainer } from "../../workers/trainer/coordinator.ts";

const settings = loadSettings();
if (!settings.redisUrl) throw new Error("REDIS_URL is not set");
const ctl = connectControl(settings.redisUrl, settings.prefix);
const number = (name: string) => (process.env[name] ? Number(process.env[name]) : undefined);
const trainer = await startTrainer(ctl, settings, {
  lockDurationMs: number("TRAINER_LOCK_MS"),
  stalledIntervalMs: number("TRAINER_STALLED_MS"),
});
console.log("trainer ready");

const stop = async () => {
  await trainer.stop();
  await ctl.redis.quit();
  process.exit(0);
};
process.on("SIGTERM", () => void stop());
process.on("SIGINT", () => void stop());
