/**
 * The services backend a scaler runs beside its replica backend (docs/services.md): local
 * processes from published images, or Kubernetes Deployments, reporting into Redis through one
 * ServiceReportStore with the platform's secrets key.
 */
import type { Control } from "../../src/redis/connection.ts";
import { loadTokenKey } from "../../src/registry-credentials/grant.ts";
import { operatorServes, PullAuthResolver } from "../../src/registry-credentials/resolve.ts";
import { RegistryCredentials } from "../../src/registry-credentials/store.ts";
import { ServiceReportStore } from "../../src/services/reports.ts";
import { SecretBox } from "../../src/services/secrets.ts";
import type { Settings } from "../../src/settings/index.ts";
import { LocalServiceBackend } from "../backends/services/local.ts";
import { engineRunner, workingEngine } from "../container-images/engine.ts";
import { imageRunner } from "../container-images/runner.ts";
import type { ServiceBackend } from "../backends/services/backend.ts";

export async function createServiceBackend(
  kind: "local" | "kubernetes",
  ctl: Control,
  settings: Pick<Settings, "services" | "kubernetes" | "registryToken" | "registries">,
  onEvent: (message: string) => void,
): Promise<ServiceBackend> {
  const box = await SecretBox.load(settings.services);
  const reports = new ServiceReportStore(ctl, box);
  // Whose credential pulls an organization's images (src/registry-credentials/resolve.ts).
  const { keyFile, issuer } = settings.registryToken;
  const pullAuth = new PullAuthResolver({
    credentials: new RegistryCredentials(ctl, async () => box),
    ...(keyFile ? { tokenKey: loadTokenKey(keyFile) } : {}),
    issuer,
    operatorFile: settings.services.pullAuthFile,
    registries: settings.registries,
  });
  if (kind === "kubernetes") {
    // Loaded only for this backend, as the replica backend's client is (scaler/start/main.ts).
    const { KubernetesServiceBackend } = await import("../backends/services/kubernetes.ts");
    const { CLUSTER_GRANT_TTL_MS } = await import("../backends/services/kubernetes-pull-secrets.ts");
    const backend = new KubernetesServiceBackend(settings.kubernetes, reports, {
      pullAuth: (org, repository) => pullAuth.resolve(org, repository, CLUSTER_GRANT_TTL_MS),
      operatorServes: (org, repository) => operatorServes(org, repository, settings.registries),
    });
    await backend.refresh();
    return backend;
  }
  const { runtime, imageCacheDir, allowRoot, hostPorts } = settings.services;
  const engine = runtime === "auto" ? await workingEngine() : runtime === "unshare" ? undefined : runtime;
  onEvent(`images run with ${engine ?? "unshare (pulled by skopeo, unpacked, run in a sandbox)"}`);
  const auth = (org: string, repository: string) => pullAuth.resolve(org, repository);
  return new LocalServiceBackend({
    reports,
    runner: engine
      ? engineRunner(engine, { auth, registries: settings.registries, allowRoot })
      : imageRunner({ cacheDir: imageCacheDir, auth, registries: settings.registries, allowRoot, hostPorts }),
    onEvent,
  });
}
