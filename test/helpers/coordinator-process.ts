/**
 * A batch coordinator alone in its own process, so tests can SIGKILL it
 * mid-job. Environment: REDIS_URL, PLATFORM_PREFIX, the AWS_* storage
 * variables, BATCH_QUEUE (the coordinator queue, so a stack's own coordinator
 * never takes the test's jobs) and BATCH_LOCK_MS / BATCH_STALLED_MS to make
 * recovery fast.
 */
import { startBatchCoordinator } from "../../src/batch/index.ts";
import { connectControl } from "../../src/redis/connection.ts";
import { loadSettings } from "../../src/settings/index.ts";

const settings = loadSettings();
if (!settings.redisUrl) throw new Error("REDIS_URL is not set");
const ctl = connectControl(settings.redisUrl, settings.prefix);
const number = (name: string) => (process.env[name] ? Number(process.env[name]) : undefined);
const coordinator = await startBatchCoordinator(ctl, settings, {
  lockDurationMs: number("BATCH_LOCK_MS"),
  stalledIntervalMs: number("BATCH_STALLED_MS"),
  queue: process.env.BATCH_QUEUE,
});
console.log("coordinator ready");

const stop = async () => {
  await coordinator.stop();
  await ctl.redis.quit();
  process.exit(0);
};
process.on("SIGTERM", () => void stop());
process.on("SIGINT", () => void stop());
