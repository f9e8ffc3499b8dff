/**
 * The gateway role, assembled once for the two processes that run it: `platform gateway` (alone,
 * against the cluster's Redis, until SIGTERM; stateless, so clusters run several) and `platform up`
 * (beside the scaler and the workers). The role is the HTTP gateway with a batch and an evaluation
 * coordinator: every gateway can pick up (or resume) a job.
 */
import { startBatchCoordinator } from "../../batch/index.ts";
import { startEvaluationCoordinator } from "../../evaluation/index.ts";
import { bootstrapAtStart } from "../../keys/bootstrap.ts";
import { trimMemoryWhenIdle } from "../../process/idle-memory.ts";
import { bounded, onStopSignals } from "../../process/shutdown.ts";
import { type Control, connectControl, maskRedisUrl } from "../../redis/connection.ts";
import { loadSettings, type Settings } from "../../settings/index.ts";
import { configureLogging, logger } from "../../telemetry/log.ts";
import { startTracing, stopTracing } from "../../telemetry/tracing.ts";
import { type RunningGateway, startGateway } from "./app.ts";

export type GatewayRole = {
  gateway: RunningGateway;
  /** Stops taking batch and evaluation work: the first step of a stop, before what runs the jobs goes. */
  stopCoordinators: () => Promise<void>;
  /** Closes the server: the last step before Redis. */
  close: () => Promise<void>;
};

/** The gateway, listening on `host`:`port`, and its coordinators; `settings.redisUrl` is the Redis `ctl` talks to. */
export async function startGatewayRole(
  ctl: Control,
  settings: Settings & { redisUrl: string },
  listen: { host: string; port: number; metricsPort?: number },
): Promise<GatewayRole> {
  const gateway = await startGateway({ ctl, settings, ...listen });
  const coordinator = await startBatchCoordinator(ctl, settings);
  const evaluator = await startEvaluationCoordinator(ctl, settings);
  trimMemoryWhenIdle({ busy: () => gateway.awaiting() > 0 });
  return {
    gateway,
    stopCoordinators: async () => {
      await bounded(coordinator.stop(), 10_000);
      await bounded(evaluator.stop(), 10_000);
    },
    close: async () => {
      await bounded(gateway.close(), 5_000);
    },
  };
}

/**
 * `platform gateway`: registers PLATFORM_BOOTSTRAP_ADMIN_KEY when set (every start: idempotent),
 * then serves until SIGTERM or SIGINT; a second one exits at once.
 */
export async function runGatewayProcess(listen: { host: string; port: number }): Promise<void> {
  const settings = loadSettings();
  const { redisUrl } = settings;
  if (!redisUrl) throw new Error("REDIS_URL is not set; the gateway needs the platform's Redis");
  configureLogging(settings.logging, { role: "gateway", defaultFormat: "json" });
  await startTracing(settings.tracing, "gateway");
  const ctl = connectControl(redisUrl, settings.prefix);
  if (settings.bootstrapAdminKey) await bootstrapAtStart(ctl, settings.bootstrapAdminKey, maskRedisUrl(redisUrl));
  const role = await startGatewayRole(ctl, { ...settings, redisUrl }, listen);
  logger("gateway").info(
    { url: role.gateway.url, metrics: role.gateway.metricsUrl },
    `gateway listening on ${role.gateway.url}; metrics on ${role.gateway.metricsUrl}`,
  );
  let stopping = false;
  const stop = async () => {
    if (stopping) process.exit(1);
    stopping = true;
    await role.stopCoordinators();
    await role.close();
    await stopTracing();
    await bounded(ctl.redis.quit(), 2_000);
    process.exit(0);
  };
  onStopSignals(() => void stop());
}
