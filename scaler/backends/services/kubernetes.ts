/**
 * Services' replicas on Kubernetes (docs/services.md): per service a Deployment pinned to its
 * rollout's image digest, a ClusterIP Service, and per revision an immutable ConfigMap and
 * Secret (kubernetes-manifests.ts builds them all). `apply` is called on every
 * reconciler tick, so it writes only what changed and reads the cluster through one shared
 * snapshot (a list of the services' Deployments and one of their pods, at most every
 * `observeIntervalMs`, however many services), from which it reports replicas and rollout
 * outcomes; pods' logs are tailed by kubernetes-pod-logs.ts.
 */
import { AppsV1Api, CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import type { V1Deployment, V1Pod } from "@kubernetes/client-node";
import type { KubernetesSettings } from "../../../src/settings/kubernetes.ts";
import type { ServiceBackend, ServiceRecord, ServiceReports } from "./backend.ts";
import {
  buildServiceDeployment,
  buildServiceEnvironment,
  buildServiceService,
  releaseToRun,
  SERVICE_ANNOTATIONS,
  SERVICE_CONTAINER,
  SERVICE_LABELS,
  SERVICES_SELECTOR,
  type ServiceManifestOptions,
  serviceSelector,
} from "./kubernetes-manifests.ts";
import { maskSecrets, podReplica, podTrouble, rolloutOutcome } from "./kubernetes-pods.ts";
import type { PullAuthSource } from "./pull-auth.ts";
import { LOG_LIMITS, parseLogLines, PodLogTailer } from "./kubernetes-pod-logs.ts";
import { PullSecrets } from "./kubernetes-pull-secrets.ts";
import { call, defaultNamespace, isNotFound, KubernetesApiError } from "../kubernetes-api.ts";

export interface KubernetesServiceBackendOptions {
  /** Default: `KubeConfig.loadFromDefault()` (KUBECONFIG, ~/.kube/config, or in-cluster). */
  kubeConfig?: KubeConfig;
  /** Secrets with the credentials of the registry services' images come from. */
  imagePullSecrets?: string[];
  /**
   * Which repositories the operator's `imagePullSecrets` serve each organization (PLATFORM_IMAGE_PULL_AUTH_SCOPE,
   * src/registry-credentials/resolve.ts `operatorServes`); without it, every service gets them.
   */
  operatorServes?: (org: string, repository: string) => boolean;
  /** How often the cluster is listed at most (replicas and rollouts are read from that listing). Default 2 s. */
  observeIntervalMs?: number;
  /** How often each service's pods' logs are read at most. Default 2 s. */
  logIntervalMs?: number;
  /** The organization's pull credential for a repository: a pull Secret per service (kubernetes-pull-secrets.ts). */
  pullAuth?: PullAuthSource;
}

type Snapshot = { at: number; deployments: Map<string, V1Deployment>; pods: Map<string, V1Pod[]> };

const keyOf = (org: string, name: string) => `${org}/${name}`;

function serviceKey(labels: Record<string, string> | undefined): string | undefined {
  const org = labels?.[SERVICE_LABELS.org];
  const name = labels?.[SERVICE_LABELS.service];
  return org && name ? keyOf(org, name) : undefined;
}

const isConflict = (error: unknown) => error instanceof KubernetesApiError && error.status === 409;

export class KubernetesServiceBackend implements ServiceBackend {
  readonly kind = "kubernetes" as const;
  readonly namespace: string;
  private readonly apps: AppsV1Api;
  private readonly core: CoreV1Api;
  private readonly manifestOptions: ServiceManifestOptions;
  private readonly observeIntervalMs: number;
  private snapshot: Snapshot | undefined;
  private snapshotting: Promise<Snapshot> | undefined;
  /** Services applied or seen in the cluster, as "<org>/<name>". */
  private readonly known = new Set<string>();
  /** Revisions whose ConfigMap and Secret exist, as "<org>/<name>/<revision>". */
  private readonly environments = new Set<string>();
  /** The Service's spec hash as last written or read, per service. */
  private readonly serviceHashes = new Map<string, string>();
  /** Per service, the pods reported and the snapshot time they were reported from. */
  private readonly reported = new Map<string, { at: number; pods: Set<string> }>();
  /** Per service: the rollout whose outcome was reported, and the settled rollout whose old revisions' objects were collected. */
  private readonly finished = new Map<string, number>();
  private readonly collected = new Map<string, string>();
  private readonly logs: PodLogTailer;

  private readonly reports: ServiceReports;
  private readonly pullSecrets: PullSecrets | undefined;
  private readonly operatorServes: ((org: string, repository: string) => boolean) | undefined;

  /** `settings`: settings.kubernetes in the scaler (its namespace, or the scaler pod's); `reports`: src/services/reports.ts. */
  constructor(settings: KubernetesSettings, reports: ServiceReports, options: KubernetesServiceBackendOptions = {}) {
    this.reports = reports;
    const kubeConfig = options.kubeConfig ?? new KubeConfig();
    if (!options.kubeConfig) kubeConfig.loadFromDefault();
    this.namespace = settings.namespace ?? defaultNamespace(kubeConfig, settings.podNamespace);
    this.apps = kubeConfig.makeApiClient(AppsV1Api);
    this.core = kubeConfig.makeApiClient(CoreV1Api);
    this.manifestOptions = {
      namespace: this.namespace,
      ...(options.imagePullSecrets ? { imagePullSecrets: options.imagePullSecrets } : {}),
    };
    this.operatorServes = options.operatorServes;
    this.pullSecrets = options.pullAuth && new PullSecrets(this.core, this.manifestOptions, options.pullAuth);
    this.observeIntervalMs = options.observeIntervalMs ?? 2000;
    this.logs = new PodLogTailer(this.core, this.namespace, reports, options.logIntervalMs ?? 2000);
  }

  async apply(service: ServiceRecord): Promise<void> {
    const key = keyOf(service.org, service.name);
    this.known.add(key);
    const snapshot = await this.observe();
    // What runs is still reported when the writes fail (the replicas' records are their
    // heartbeat: a service whose new revision cannot be written keeps its serving replicas).
    let failure: unknown;
    try {
      await this.ensureEnvironment(service, releaseToRun(service).revision);
      const pullSecret = await this.pullSecrets?.ensure(service);
      const deployment = await this.ensureDeployment(service, snapshot.deployments.get(key), pullSecret);
      snapshot.deployments.set(key, deployment);
      await this.ensureService(service);
      await this.reportRollout(service, deployment, snapshot.pods.get(key) ?? []);
      await this.collectEnvironments(service);
    } catch (error) {
      failure = error;
    }
    await this.reportReplicas(service, snapshot);
    await this.logs.poll(service, snapshot.pods.get(key) ?? []);
    if (failure !== undefined) throw failure;
  }

  async remove(org: string, name: string): Promise<void> {
    const key = keyOf(org, name);
    const labelSelector = serviceSelector(org, name);
    const ns = this.namespace;
    const deployments = await call(`list deployments of ${key}`, () =>
      this.apps.listNamespacedDeployment({ namespace: ns, labelSelector }),
    );
    for (const d of deployments.items)
      await this.ignoreNotFound(`delete deployment ${ns}/${d.metadata!.name}`, () =>
        this.apps.deleteNamespacedDeployment({
          name: d.metadata!.name!,
          namespace: ns,
          propagationPolicy: "Background",
        }),
      );
    const services = await call(`list services of ${key}`, () =>
      this.core.listNamespacedService({ namespace: ns, labelSelector }),
    );
    for (const s of services.items)
      await this.ignoreNotFound(`delete service ${ns}/${s.metadata!.name}`, () =>
        this.core.deleteNamespacedService({ name: s.metadata!.name!, namespace: ns }),
      );
    await this.deleteEnvironments(key, labelSelector, () => true);
    await this.pullSecrets?.delete(org, name);
    for (const pod of this.reported.get(key)?.pods ?? []) {
      await this.reports.replicaGone(org, name, pod);
      this.logs.forgetPod(pod);
    }
    this.reported.delete(key);
    this.known.delete(key);
    this.serviceHashes.delete(key);
    this.logs.forgetService(org, name);
    this.finished.delete(key);
    this.collected.delete(key);
    for (const e of this.environments) if (e.startsWith(`${key}/`)) this.environments.delete(e);
    this.snapshot?.deployments.delete(key);
    this.snapshot?.pods.delete(key);
  }

  services(): string[] {
    return [...this.known];
  }

  /** Lists the cluster for `services()`; call once at start-up, so services whose record is gone are found. */
  async refresh(): Promise<string[]> {
    await this.observe(true);
    return this.services();
  }

  /** Nothing to stop: the Deployments are the cluster's to run. */
  async close(): Promise<void> {}

  /** The shared listing, at most `observeIntervalMs` old; concurrent callers share one listing. */
  private async observe(force = false): Promise<Snapshot> {
    if (!force && this.snapshot && Date.now() - this.snapshot.at < this.observeIntervalMs) return this.snapshot;
    this.snapshotting ??= (async () => {
      try {
        const at = Date.now();
        const [deployments, pods] = await Promise.all([
          call(`list service deployments in ${this.namespace}`, () =>
            this.apps.listNamespacedDeployment({ namespace: this.namespace, labelSelector: SERVICES_SELECTOR }),
          ),
          call(`list service pods in ${this.namespace}`, () =>
            this.core.listNamespacedPod({ namespace: this.namespace, labelSelector: SERVICES_SELECTOR }),
          ),
        ]);
        const snapshot: Snapshot = { at, deployments: new Map(), pods: new Map() };
        for (const d of deployments.items) {
          const key = serviceKey(d.metadata?.labels);
          if (!key) continue;
          snapshot.deployments.set(key, d);
          this.known.add(key);
        }
        for (const p of pods.items) {
          const key = serviceKey(p.metadata?.labels);
          if (key) snapshot.pods.set(key, [...(snapshot.pods.get(key) ?? []), p]);
        }
        this.snapshot = snapshot;
        return snapshot;
      } finally {
        this.snapshotting = undefined;
      }
    })();
    return this.snapshotting;
  }

  /** The revision's ConfigMap and Secret, written once: they are immutable, so one that exists is the right one. */
  private async ensureEnvironment(service: ServiceRecord, revision: string): Promise<void> {
    const id = `${keyOf(service.org, service.name)}/${revision}`;
    if (this.environments.has(id)) return;
    const parts = await this.reports.environmentParts(service.org, service.name, revision);
    const { configMap, secret } = buildServiceEnvironment(service, revision, parts, this.manifestOptions);
    const ns = this.namespace;
    const name = configMap.metadata!.name!;
    try {
      await this.ignoreConflict(`create configmap ${ns}/${name}`, () =>
        this.core.createNamespacedConfigMap({ namespace: ns, body: configMap }),
      );
      await this.ignoreConflict(`create secret ${ns}/${name}`, () =>
        this.core.createNamespacedSecret({ namespace: ns, body: secret }),
      );
    } catch (error) {
      // Refused for what it holds (over the 1 MiB an object may be): no retry can succeed, so
      // the rollout fails now rather than at its deadline, and the release that serves stays.
      const refused = error instanceof KubernetesApiError && (error.status === 422 || error.status === 413);
      const { rollout } = service;
      if (refused && rollout.phase === "progressing" && rollout.release.revision === revision) {
        await this.reports.rolloutFinished(service.org, service.name, rollout.id, {
          phase: "failed",
          reason: `its environment cannot be stored in the cluster: ${error.message}`,
        });
        this.finished.set(keyOf(service.org, service.name), rollout.id);
      }
      throw error;
    }
    this.environments.add(id);
  }

  /** Creates the Deployment, or replaces it when what it should run changed; else leaves it alone. */
  private async ensureDeployment(
    service: ServiceRecord,
    current: V1Deployment | undefined,
    pullSecret: string | undefined,
  ): Promise<V1Deployment> {
    // The operator's secrets only for the repositories it lets this organization pull with them.
    const serves = this.operatorServes?.(service.org, service.image_repository) ?? true;
    const imagePullSecrets = serves ? (this.manifestOptions.imagePullSecrets ?? []) : [];
    const desired = buildServiceDeployment(service, releaseToRun(service), {
      ...this.manifestOptions,
      imagePullSecrets: pullSecret ? [...imagePullSecrets, pullSecret] : imagePullSecrets,
    });
    const name = desired.metadata!.name!;
    const ns = this.namespace;
    if (!current) {
      try {
        return await call(`create deployment ${ns}/${name}`, () =>
          this.apps.createNamespacedDeployment({ namespace: ns, body: desired }),
        );
      } catch (error) {
        // Created since the last listing (by this scaler's previous tick, or a scaler before it).
        if (!isConflict(error)) throw error;
        current = await call(`read deployment ${ns}/${name}`, () =>
          this.apps.readNamespacedDeployment({ name, namespace: ns }),
        );
      }
    }
    const hash = SERVICE_ANNOTATIONS.specHash;
    if (current.metadata?.annotations?.[hash] === desired.metadata!.annotations![hash]) return current;
    desired.metadata!.resourceVersion = current.metadata?.resourceVersion;
    try {
      return await call(`replace deployment ${ns}/${name}`, () =>
        this.apps.replaceNamespacedDeployment({ name, namespace: ns, body: desired }),
      );
    } catch (error) {
      // Changed under us (the controller writes status, another scaler...): relist next time.
      if (isConflict(error)) this.snapshot = undefined;
      throw error;
    }
  }

  private async ensureService(service: ServiceRecord): Promise<void> {
    const key = keyOf(service.org, service.name);
    const desired = buildServiceService(service, this.manifestOptions);
    const hash = desired.metadata!.annotations![SERVICE_ANNOTATIONS.specHash]!;
    if (this.serviceHashes.get(key) === hash) return;
    const name = desired.metadata!.name!;
    const ns = this.namespace;
    let current: Awaited<ReturnType<CoreV1Api["readNamespacedService"]>> | undefined;
    try {
      current = await call(`read service ${ns}/${name}`, () =>
        this.core.readNamespacedService({ name, namespace: ns }),
      );
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
    if (!current) {
      await call(`create service ${ns}/${name}`, () =>
        this.core.createNamespacedService({ namespace: ns, body: desired }),
      );
    } else if (current.metadata?.annotations?.[SERVICE_ANNOTATIONS.specHash] !== hash) {
      // The API server keeps the allocated cluster IP when the update leaves it out.
      desired.metadata!.resourceVersion = current.metadata?.resourceVersion;
      await call(`replace service ${ns}/${name}`, () =>
        this.core.replaceNamespacedService({ name, namespace: ns, body: desired }),
      );
    }
    this.serviceHashes.set(key, hash);
  }

  /** Ends a progressing rollout once its Deployment's status decides it, once. */
  private async reportRollout(service: ServiceRecord, deployment: V1Deployment, pods: V1Pod[]): Promise<void> {
    const key = keyOf(service.org, service.name);
    if (this.finished.get(key) === service.rollout.id) return;
    const outcome = rolloutOutcome(deployment, service);
    if (!outcome) return;
    if (outcome.phase === "failed") {
      const reason = await this.failureReason(service, outcome.reason, pods);
      await this.reports.rolloutFinished(service.org, service.name, service.rollout.id, { phase: "failed", reason });
    } else {
      await this.reports.rolloutFinished(service.org, service.name, service.rollout.id, outcome);
    }
    this.finished.set(key, service.rollout.id);
  }

  /**
   * The deadline's message, then for the rollout's pods that are not ready: why (waiting reason,
   * last exit, restarts) and their last log lines (the previous container's when it restarted),
   * with the revision's secret values masked; at most 8 KiB, the record's limit.
   */
  private async failureReason(service: ServiceRecord, headline: string, pods: V1Pod[]): Promise<string> {
    const revision = service.rollout.release.revision;
    const failing = pods
      .filter((p) => p.metadata?.labels?.[SERVICE_LABELS.revision] === revision)
      .map((p) => ({ pod: p, trouble: podTrouble(p) }))
      .filter((p) => p.trouble !== undefined)
      .slice(0, LOG_LIMITS.reasonPods);
    const lines = [headline];
    // The secrets to mask log lines with; unreadable, the lines are left out rather than risk a value in the record.
    const secrets =
      failing.length === 0
        ? {}
        : await this.reports.environmentParts(service.org, service.name, revision).then(
            (parts) => parts.secrets,
            () => undefined,
          );
    for (const { pod, trouble } of failing) {
      const name = pod.metadata!.name!;
      lines.push(`pod ${name}: ${trouble}`);
      if (!secrets) continue;
      const restarted =
        (pod.status?.containerStatuses?.find((c) => c.name === SERVICE_CONTAINER)?.restartCount ?? 0) > 0;
      const text = await this.logs
        .read(name, { previous: restarted, tailLines: LOG_LIMITS.reasonLines })
        .catch(() => (restarted ? this.logs.read(name, { tailLines: LOG_LIMITS.reasonLines }) : ""))
        .catch(() => "");
      for (const line of parseLogLines(text)) lines.push(`  ${line.text.slice(0, 500)}`);
    }
    if (!secrets) lines.push("(log lines left out: the revision's secrets could not be read to mask them)");
    return maskSecrets(lines.join("\n"), secrets ?? {}).slice(0, 8192);
  }

  /**
   * Once the rollout is settled, the ConfigMaps and Secrets of revisions nothing runs any more:
   * kept are the release the Deployment runs, the one serving, and the rollout's own.
   */
  private async collectEnvironments(service: ServiceRecord): Promise<void> {
    if (service.rollout.phase === "progressing") return;
    const key = keyOf(service.org, service.name);
    const id = `${service.rollout.id}:${service.rollout.phase}`;
    if (this.collected.get(key) === id) return;
    const keep = new Set(
      [releaseToRun(service), service.current, service.rollout.release].flatMap((r) => (r ? [r.revision] : [])),
    );
    await this.deleteEnvironments(key, serviceSelector(service.org, service.name), (revision) => !keep.has(revision));
    for (const e of this.environments) {
      if (e.startsWith(`${key}/`) && !keep.has(e.slice(key.length + 1))) this.environments.delete(e);
    }
    this.collected.set(key, id);
  }

  private async deleteEnvironments(key: string, labelSelector: string, drop: (revision: string) => boolean) {
    const ns = this.namespace;
    const maps = await call(`list configmaps of ${key}`, () =>
      this.core.listNamespacedConfigMap({ namespace: ns, labelSelector }),
    );
    for (const m of maps.items) {
      if (!drop(m.metadata?.labels?.[SERVICE_LABELS.revision] ?? "")) continue;
      await this.ignoreNotFound(`delete configmap ${ns}/${m.metadata!.name}`, () =>
        this.core.deleteNamespacedConfigMap({ name: m.metadata!.name!, namespace: ns }),
      );
    }
    const secrets = await call(`list secrets of ${key}`, () =>
      this.core.listNamespacedSecret({ namespace: ns, labelSelector }),
    );
    for (const s of secrets.items) {
      if (!drop(s.metadata?.labels?.[SERVICE_LABELS.revision] ?? "")) continue;
      await this.ignoreNotFound(`delete secret ${ns}/${s.metadata!.name}`, () =>
        this.core.deleteNamespacedSecret({ name: s.metadata!.name!, namespace: ns }),
      );
    }
  }

  /** Each pod as a replica record, once per listing (the records' heartbeat); pods gone since, as gone. */
  private async reportReplicas(service: ServiceRecord, snapshot: Snapshot): Promise<void> {
    const key = keyOf(service.org, service.name);
    const last = this.reported.get(key);
    if (last && last.at === snapshot.at) return;
    const now = Date.now();
    const pods = new Set<string>();
    for (const pod of snapshot.pods.get(key) ?? []) {
      const replica = podReplica(pod, service, now);
      if (!replica) continue;
      pods.add(replica.id);
      await this.reports.replica(service.org, service.name, replica);
    }
    for (const gone of last?.pods ?? []) {
      if (pods.has(gone)) continue;
      await this.reports.replicaGone(service.org, service.name, gone);
      this.logs.forgetPod(gone);
    }
    this.reported.set(key, { at: snapshot.at, pods });
  }

  private async ignoreNotFound(operation: string, request: () => Promise<unknown>): Promise<void> {
    try {
      await call(operation, request);
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
  }

  private async ignoreConflict(operation: string, request: () => Promise<unknown>): Promise<void> {
    try {
      await call(operation, request);
    } catch (error) {
      if (!isConflict(error)) throw error;
    }
  }
}
