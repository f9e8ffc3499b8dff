/**
 * Doctor's cluster check: where a Kubernetes backend is configured (KUBECONFIG, or running in a
 * pod), its API server answers `/version` through the credentials the backend would use; skipped
 * otherwise. The Kubernetes client is loaded only then: it costs half a second.
 */
import { type DoctorCheck, fail, ok, skip } from "./check.ts";

export const clusterCheck: DoctorCheck = {
  id: "cluster",
  name: "cluster",
  required: true,
  run: async (ctx) => {
    const source = ctx.tools.kubernetes;
    if (!source) return skip("no Kubernetes backend configured (KUBECONFIG is not set, not in a pod)");
    const { KubeConfig, VersionApi } = await import("@kubernetes/client-node");
    const config = new KubeConfig();
    const fix = "check KUBECONFIG and its current context (`kubectl cluster-info`)";
    try {
      config.loadFromDefault();
    } catch (e) {
      return fail(`cannot load the Kubernetes configuration (${source}): ${(e as Error).message}`, fix);
    }
    const server = config.getCurrentCluster()?.server ?? "(no cluster in the current context)";
    try {
      const version = await config.makeApiClient(VersionApi).getCode();
      return ok(`${server} answers: Kubernetes ${version.gitVersion} (context ${config.getCurrentContext()})`, {
        server,
        context: config.getCurrentContext(),
        version: version.gitVersion,
      });
    } catch (e) {
      return fail(`cannot reach the cluster at ${server}: ${(e as Error).message}`, fix);
    }
  },
};
