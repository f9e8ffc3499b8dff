/**
 * The services backend a scaler runs beside its replica backend (docs/services.md): local
 * processes from published images, or Kubernetes Deployments, reporting into Redis through one
 * ServiceReportStore with the platform's secrets key.
 */
import type { Control } from "../src/redis/connection.ts";
import { ServiceReportStore } from "../src/services/reports.ts";
import { SecretBox } from "../src/services/secrets.ts";
import type { Settings } from "../src/settings/index.ts";
import { LocalServiceBackend } from "./backends/local-services.ts";
import { engineRunner, workingEngine } from "./images/engine.ts";
import { imageRunner } from "./images/runner.ts";
import type { ServiceBackend } from "./service-backend.ts";

export async function createServiceBackend(
  kind: "local" | "kubernetes",
  ctl: Control,
  settings: Pick<Settings, "services" | "kubernetes">,
  onEvent: (message: string) => void,
): Promise<ServiceBackend> {
  const reports = new ServiceReportStore(ctl, await SecretBox.load(settings.services));
  if (kind === "kubernetes") {
    // Loaded only for this backend, as the replica backend's client is (scaler/main.ts).
    const { KubernetesServiceBackend } = await import("./backends/kubernetes-services.ts");
    const backend = new KubernetesServiceBackend(settings.kubernetes, reports);
    await backend.refresh();
    return backend;
  }
  const { runtime, pullAuthFile, imageCacheDir } = settings.services;
  const engine = runtime === "auto" ? await workingEngine() : runtime === "unshare" ? undefined : runtime;
  onEvent(`images run with ${engine ?? "unshare (pulled by skopeo, unpacked, run as the image's user)"}`);
  return new LocalServiceBackend({
    reports,
    runner: engine
      ? engineRunner(engine, { authFile: pullAuthFile })
      : imageRunner({ cacheDir: imageCacheDir, authFile: pullAuthFile }),
    onEvent,
  });
}
