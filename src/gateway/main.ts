/**
 * The gateway process (`platform gateway`): the HTTP gateway, a batch and an evaluation coordinator against one
 * Redis, until SIGTERM. Stateless: clusters run several against the same Redis.
 */
import { startBatchCoordinator } from "../batch/index.ts";
import { startEvaluationCoordinator } from "../evaluation/index.ts";
import { type Control, connectControl } from "../redis/connection.ts";
import { loadSettings } from "../settings/index.ts";
import { configureLogging, logger } from "../telemetry/log.ts";
import { startTracing, stopTracing } from "../telemetry/tracing.ts";
import { trimMemoryWhenIdle } from "../process/idle-memory.ts";
import { startGateway } from "./app.ts";

export type GatewayProcessOptions = {
  host: string;
  port: number;
  /** Runs once Redis is connected, before the gateway listens (the CLI registers PLATFORM_BOOTSTRAP_ADMIN_KEY here). */
  beforeListen?: (ctl: Control) => Promise<unknown>;
};

export async function runGatewayProcess(options: GatewayProcessOptions): Promise<void> {
  const settings = loadSettings();
  if (!settings.redisUrl) throw new Error("REDIS_URL is not set; the gateway needs the platform's Redis");
  configureLogging(settings.logging, { role: "gateway", defaultFormat: "json" });
  await startTracing(settings.tracing, "gateway");
  const ctl = connectControl(settings.redisUrl, settings.prefix);
  await options.beforeListen?.(ctl);
  const gateway = await startGateway({ ctl, settings, host: options.host, port: options.port });
  // Every gateway also coordinates batch jobs: any of them can pick up (or resume) a job.
  const coordinator = await startBatchCoordinator(ctl, settings);
  const evaluator = await startEvaluationCoordinator(ctl, settings);
  logger("gateway").info({ url: gateway.url }, `gateway listening on ${gateway.url}`);
  trimMemoryWhenIdle({ busy: () => gateway.awaiting() > 0 });
  const stop = async () => {
    await coordinator.stop();
    await evaluator.stop();
    await gateway.close();
    await stopTracing();
    await ctl.redis.quit();
    process.exit(0);
  };
  process.once("SIGTERM", () => void stop());
  process.once("SIGINT", () => void stop());
}
