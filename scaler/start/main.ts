/**
 * The scaler process (`platform scaler --backend local|kubernetes`): the
 * autoscaler and the reconciler against one Redis, acting through one backend,
 * until SIGTERM. Several may run; the lease lets exactly one act.
 */
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { connectControl } from "../../src/redis/connection.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { configureLogging, logLine } from "../../src/telemetry/log.ts";
import type { ReplicaBackend } from "../backends/endpoints/backend.ts";
import { WORKER_NODE_FLAGS } from "../../src/process/worker-env.ts";
import { LocalBackend } from "../backends/endpoints/local.ts";
import { startScaler } from "../run.ts";
import { createServiceBackend } from "./services.ts";

export type ScalerProcessOptions = {
  backend: "local" | "kubernetes";
  intervalMs?: number;
  leaseTtlMs?: number;
  holderId?: string;
};

const BIN = fileURLToPath(new URL("../../bin/platform.js", import.meta.url));

export async function runScalerProcess(options: ScalerProcessOptions): Promise<void> {
  const settings = loadSettings();
  if (!settings.redisUrl) throw new Error("REDIS_URL is not set; the scaler needs the platform's Redis");
  configureLogging(settings.logging, { role: "scaler", defaultFormat: "json" });
  const ctl = connectControl(settings.redisUrl, settings.prefix);
  const log = (line: string) => logLine(line);
  let backend: ReplicaBackend;
  if (options.backend === "kubernetes") {
    // The Kubernetes client costs ~85 MiB resident: loaded only for this backend.
    const { KubernetesBackend } = await import("../backends/endpoints/kubernetes.ts");
    const k8s = new KubernetesBackend(settings.kubernetes);
    // Learn which worker Deployments exist, so ones whose endpoint is gone get removed.
    await k8s.refresh();
    backend = k8s;
  } else {
    backend = new LocalBackend({
      ctl,
      workerCommand: [process.execPath, ...WORKER_NODE_FLAGS, BIN, "worker"],
      // Workers inherit this environment (and so its settings), with the Redis and storage this scaler resolved.
      env: {
        ...process.env,
        REDIS_URL: settings.redisUrl,
        PLATFORM_DATA_DIR: settings.dataDir,
        PLATFORM_ARTIFACTS_URL: settings.artifactsUrl,
      },
      logDir: join(settings.dataDir, "logs"),
      standby: settings.worker.standby,
      workerMetrics: settings.worker.metrics,
      onEvent: (m) => log(`[replicas] ${m}`),
    });
  }
  const services = await createServiceBackend(options.backend, ctl, settings, (m) => log(`[services] ${m}`));
  const scaler = await startScaler(ctl, backend, {
    services,
    intervalMs: options.intervalMs,
    leaseTtlMs: options.leaseTtlMs,
    holderId: options.holderId,
    log,
  });
  log(
    `[scaler] ${scaler.autoscaler.holderId} running with the ${backend.kind} backend${scaler.autoscaler.isLeader() ? "" : " (standing by: another scaler holds the lease)"}`,
  );

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await scaler.stop(); // releases the lease, so a standby takes over at once
    await backend.close();
    await services.close();
    await ctl.redis.quit().catch(() => undefined);
    process.exit(0);
  };
  process.once("SIGTERM", () => void stop());
  process.once("SIGINT", () => void stop());
}
