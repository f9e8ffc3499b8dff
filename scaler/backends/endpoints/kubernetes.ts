/**
 * Replicas as Deployments in a Kubernetes cluster: one Deployment per
 * endpoint-version (see kubernetes-manifests.ts), scaled through the `scale`
 * subresource. Works in-cluster (service account) or from a kubeconfig.
 */
import { AppsV1Api, CoreV1Api, KubeConfig, setHeaderOptions } from "@kubernetes/client-node";
import type { V1Deployment } from "@kubernetes/client-node";
import type { Endpoint } from "../../../src/endpoints/record.ts";
import { runningRevisions } from "../../../src/endpoints/rollout.ts";
import { call, defaultNamespace, isNotFound } from "../kubernetes-api.ts";
import type { BackendReplicas, ReplicaBackend } from "./backend.ts";
import {
  ANNOTATIONS,
  EXTERNAL_REPLICAS,
  WORKERS_SELECTOR,
  buildWorkerDeployment,
  type WorkerDeploymentOptions,
} from "./kubernetes-manifests.ts";

export interface KubernetesBackendOptions extends Omit<WorkerDeploymentOptions, "namespace" | "image"> {
  /** Default: `podNamespace`, then the in-cluster service account's namespace, then the kubeconfig context's, then "default". */
  namespace?: string;
  /** Default: the image of the pod this scaler runs in (POD_NAME), so workers always match the scaler's release. */
  image?: string;
  /** Default: `KubeConfig.loadFromDefault()` (KUBECONFIG, ~/.kube/config, or in-cluster). */
  kubeConfig?: KubeConfig;
  /** The pod to copy the image from when `image` is not given (POD_NAME, from the downward API). */
  podName?: string;
  /** The scaler's own namespace (POD_NAMESPACE, from the downward API). */
  podNamespace?: string;
}

function replicasAreExternal(deployment: V1Deployment): boolean {
  return deployment.metadata?.annotations?.[ANNOTATIONS.replicas] === EXTERNAL_REPLICAS;
}

export class KubernetesBackend implements ReplicaBackend {
  readonly kind = "kubernetes" as const;
  readonly namespace: string;
  private readonly apps: AppsV1Api;
  private readonly core: CoreV1Api;
  private readonly options: KubernetesBackendOptions;
  private image: string | undefined;
  private known = new Set<string>();

  /** `options`: settings.kubernetes in the scaler (PLATFORM_WORKER_*, POD_NAME...), or given outright. */
  constructor(options: KubernetesBackendOptions = {}) {
    const kubeConfig = options.kubeConfig ?? new KubeConfig();
    if (!options.kubeConfig) kubeConfig.loadFromDefault();
    this.options = options;
    this.namespace = options.namespace ?? defaultNamespace(kubeConfig, options.podNamespace);
    this.image = options.image;
    this.apps = kubeConfig.makeApiClient(AppsV1Api);
    this.core = kubeConfig.makeApiClient(CoreV1Api);
  }

  /**
   * One Deployment per revision the record runs (src/endpoints/rollout.ts): an update rolling out
   * beside the one serving, drained ones finishing their queue. Which run, and for how long, is
   * the record's to say (the scaler's rollout step); a Deployment of no such revision goes.
   */
  async scale(endpoint: Endpoint, replicas: number): Promise<void> {
    const image = await this.workerImage();
    const existing = await this.endpointDeployments(endpoint.name);
    const wanted = new Set<string>();
    for (const rev of runningRevisions(endpoint, replicas)) {
      const desired = buildWorkerDeployment(rev.view, rev.replicas, {
        ...this.options,
        namespace: this.namespace,
        image,
      });
      const name = desired.metadata!.name!;
      wanted.add(name);
      await this.apply(
        desired,
        existing.find((d) => d.metadata?.name === name),
      );
    }
    this.known.add(endpoint.name);
    for (const stale of existing) {
      if (!wanted.has(stale.metadata!.name!)) await this.deleteDeployment(stale.metadata!.name!);
    }
  }

  /** Creates `desired`, or changes `current` to it: the whole spec when it changed, else the replica count. */
  private async apply(desired: V1Deployment, current: V1Deployment | undefined): Promise<void> {
    const name = desired.metadata!.name!;
    const replicas = desired.spec!.replicas;
    if (!current) {
      await call(`create deployment ${this.namespace}/${name}`, () =>
        this.apps.createNamespacedDeployment({ namespace: this.namespace, body: desired }),
      );
    } else if (
      current.metadata?.annotations?.[ANNOTATIONS.specHash] !== desired.metadata!.annotations![ANNOTATIONS.specHash]
    ) {
      desired.metadata!.resourceVersion = current.metadata?.resourceVersion;
      if (replicasAreExternal(current)) {
        desired.metadata!.annotations![ANNOTATIONS.replicas] = EXTERNAL_REPLICAS;
        desired.spec!.replicas = current.spec?.replicas;
      }
      await call(`replace deployment ${this.namespace}/${name}`, () =>
        this.apps.replaceNamespacedDeployment({ name, namespace: this.namespace, body: desired }),
      );
    } else if (current.spec?.replicas !== replicas && !replicasAreExternal(current)) {
      await call(`scale deployment ${this.namespace}/${name}`, () =>
        this.apps.patchNamespacedDeploymentScale(
          { name, namespace: this.namespace, body: { spec: { replicas } } },
          setHeaderOptions("Content-Type", "application/merge-patch+json"),
        ),
      );
    }
  }

  /** Summed over the endpoint's Deployments, so a version cut-over in progress shows both. */
  async observe(endpointName: string): Promise<BackendReplicas> {
    const deployments = await this.endpointDeployments(endpointName);
    return {
      requested: deployments.reduce((n, d) => n + (d.spec?.replicas ?? 0), 0),
      ready: deployments.reduce((n, d) => n + (d.status?.readyReplicas ?? 0), 0),
    };
  }

  async remove(endpointName: string): Promise<void> {
    for (const deployment of await this.endpointDeployments(endpointName)) {
      await this.deleteDeployment(deployment.metadata!.name!);
    }
    this.known.delete(endpointName);
  }

  /** Nothing to stop: the Deployments are the cluster's to run. */
  async close(): Promise<void> {}

  /**
   * Endpoints that have worker Deployments, as of the last API listing, so the
   * reconciler can remove the ones whose endpoint record is gone.
   */
  endpoints(): string[] {
    return [...this.known];
  }

  /** Re-lists the cluster for `endpoints()`; call once at start-up, before any scale(). */
  async refresh(): Promise<string[]> {
    await this.workerDeployments();
    return this.endpoints();
  }

  private async workerDeployments(): Promise<V1Deployment[]> {
    const list = await call(`list deployments in ${this.namespace}`, () =>
      this.apps.listNamespacedDeployment({ namespace: this.namespace, labelSelector: WORKERS_SELECTOR }),
    );
    const items = list.items.filter((d) => d.metadata?.annotations?.[ANNOTATIONS.endpoint] !== undefined);
    this.known = new Set(items.map((d) => d.metadata!.annotations![ANNOTATIONS.endpoint]!));
    return items;
  }

  private async endpointDeployments(endpointName: string): Promise<V1Deployment[]> {
    // Label values can be sanitised, so the exact name is compared from the annotation.
    return (await this.workerDeployments()).filter(
      (d) => d.metadata!.annotations![ANNOTATIONS.endpoint] === endpointName,
    );
  }

  private async deleteDeployment(name: string): Promise<void> {
    try {
      await call(`delete deployment ${this.namespace}/${name}`, () =>
        this.apps.deleteNamespacedDeployment({ name, namespace: this.namespace, propagationPolicy: "Background" }),
      );
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }

  private async workerImage(): Promise<string> {
    if (this.image) return this.image;
    const podName = this.options.podName;
    if (!podName) {
      throw new Error(
        "Kubernetes backend: no worker image; set PLATFORM_WORKER_IMAGE or run the scaler in a pod with POD_NAME set",
      );
    }
    const pod = await call(`read pod ${this.namespace}/${podName}`, () =>
      this.core.readNamespacedPod({ name: podName, namespace: this.namespace }),
    );
    const image = pod.spec?.containers[0]?.image;
    if (!image)
      throw new Error(
        `Kubernetes backend: pod ${this.namespace}/${podName} has no container image to reuse for workers`,
      );
    this.image = image;
    return image;
  }
}
