/**
 * Services' image-pull Secrets on Kubernetes (docs/services.md, "Pulling from a private
 * registry"): per service, where its organization has its own credential for the image's registry
 * or the registry trusts the platform's token server, a `kubernetes.io/dockerconfigjson` Secret
 * (kubernetes-manifests.ts, buildPullSecret) that only that service's Deployment names.
 * Written when it changes, so each reconciler tick costs a look at a map: the organization's
 * credential is read again every minute (a change or a removal reaches the cluster then), a pull
 * grant renewed when half its life is gone. Without either, the operator's `imagePullSecrets`
 * (PLATFORM_K8S_IMAGE_PULL_SECRETS) are what the kubelet has, as before.
 */
import { createHash } from "node:crypto";
import type { CoreV1Api } from "@kubernetes/client-node";
import type { PullAuthSource } from "./pull-auth.ts";
import { authJson } from "./pull-auth.ts";
import type { ServiceRecord } from "./backend.ts";
import { buildPullSecret, pullSecretName, type ServiceManifestOptions } from "./kubernetes-manifests.ts";
import { call, isNotFound, KubernetesApiError } from "../kubernetes-api.ts";

/** How long a pull grant in a cluster lives: pods are rescheduled and scaled long after a rollout. */
export const CLUSTER_GRANT_TTL_MS = 24 * 60 * 60_000;
const RECHECK_MS = 60_000;

type Written = { name: string | undefined; hash: string; recheckAt: number };

export class PullSecrets {
  private readonly written = new Map<string, Written>();
  private readonly core: CoreV1Api;
  private readonly options: ServiceManifestOptions;
  private readonly auth: PullAuthSource;

  /** `auth`: the organization's credential for a repository (resolved with CLUSTER_GRANT_TTL_MS grants). */
  constructor(core: CoreV1Api, options: ServiceManifestOptions, auth: PullAuthSource) {
    this.core = core;
    this.options = options;
    this.auth = auth;
  }

  /** The name of the service's pull Secret, written if it changed; undefined where there is none to write. */
  async ensure(service: ServiceRecord): Promise<string | undefined> {
    const key = `${service.org}/${service.name}`;
    const now = Date.now();
    const known = this.written.get(key);
    if (known && known.recheckAt > now) return known.name;
    const auth = await this.auth(service.org, service.image_repository);
    if (auth.source !== "organization" && auth.source !== "token_server") {
      if (known?.name) await this.delete(service.org, service.name);
      this.written.set(key, { name: undefined, hash: "", recheckAt: now + RECHECK_MS });
      return undefined;
    }
    const config = authJson(auth.host, auth.username, auth.password);
    const hash = createHash("sha256").update(config).digest("hex");
    const secret = buildPullSecret(service, config, this.options);
    const name = secret.metadata?.name as string;
    const ns = this.options.namespace;
    if (known?.hash !== hash) {
      try {
        await call(`create secret ${ns}/${name}`, () =>
          this.core.createNamespacedSecret({ namespace: ns, body: secret }),
        );
      } catch (error) {
        if (!(error instanceof KubernetesApiError && error.status === 409)) throw error;
        await call(`replace secret ${ns}/${name}`, () =>
          this.core.replaceNamespacedSecret({ name, namespace: ns, body: secret }),
        );
      }
    }
    const recheckAt = now + (auth.source === "token_server" ? CLUSTER_GRANT_TTL_MS / 2 : RECHECK_MS);
    this.written.set(key, { name, hash, recheckAt });
    return name;
  }

  async delete(org: string, name: string): Promise<void> {
    this.written.delete(`${org}/${name}`);
    const ns = this.options.namespace;
    const secret = pullSecretName(org, name);
    try {
      await call(`delete secret ${ns}/${secret}`, () =>
        this.core.deleteNamespacedSecret({ name: secret, namespace: ns }),
      );
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }
}
