/**
 * The Kubernetes objects one deployed service runs as (docs/services.md), as pure functions of
 * its record: a Deployment, a ClusterIP Service, and per revision a ConfigMap (its variables)
 * and a Secret (its secrets). Kept apart from the API calls (kubernetes.ts) so every
 * object the backend can send is unit-testable and checked against the Kubernetes schemas; and
 * how the backend reads them back (a pod as a replica record, a Deployment's status as a
 * rollout's outcome: kubernetes-pods.ts), for the same reason.
 */
import { createHash } from "node:crypto";
import type {
  V1ConfigMap,
  V1ContainerPort,
  V1Deployment,
  V1EnvVar,
  V1Probe,
  V1Secret,
  V1Service,
} from "@kubernetes/client-node";
import type { Release, ServiceRecord } from "../../../src/services/record.ts";
import type { EnvironmentParts } from "./backend.ts";

export const SERVICE_APP_NAME = "platform-service";
export const SERVICE_MANAGED_BY = "platform-scaler";
export const SERVICE_CONTAINER = "service";

/**
 * Label keys on every object of a service and on its pods. An organization id and a service
 * name are both valid label values as they are (src/contracts/orgs.ts, src/services/names.ts), so
 * lookups select by them exactly; no annotation is needed to recover them.
 */
export const SERVICE_LABELS = {
  name: "app.kubernetes.io/name",
  managedBy: "app.kubernetes.io/managed-by",
  org: "platform/org",
  service: "platform/service",
  revision: "platform/revision",
} as const;

export const SERVICE_ANNOTATIONS = {
  tag: "platform/tag",
  digest: "platform/digest",
  /** On the Deployment only: the rollout whose outcome its status decides (kept off the pod template, see below). */
  rollout: "platform/rollout",
  specHash: "platform/spec-hash",
} as const;

/** Every object the services backend manages, whatever the organization. */
export const SERVICES_SELECTOR = `${SERVICE_LABELS.name}=${SERVICE_APP_NAME},${SERVICE_LABELS.managedBy}=${SERVICE_MANAGED_BY}`;

/** One service's objects, all revisions. */
export function serviceSelector(org: string, name: string): string {
  return `${SERVICES_SELECTOR},${SERVICE_LABELS.org}=${org},${SERVICE_LABELS.service}=${name}`;
}

/** Where the Python scaffold serves Prometheus' /metrics (its gRPC port speaks only HTTP/2 gRPC). */
export const PYTHON_METRICS_PORT = 9464;

const DNS_LABEL_MAX = 63;
const HASH_LENGTH = 8;
/** Startup probe period: the rollout's deadline is counted in these. */
const STARTUP_PERIOD_SECONDS = 2;

function shortHash(text: string): string {
  return createHash("sha256").update(text).digest("hex").slice(0, HASH_LENGTH);
}

/**
 * `svc-<org>-<name>-<hash>`: the Deployment's and the Service's name. Always suffixed with a
 * hash of the pair, because "-" may appear in both an organization id and a service name (org
 * "a-b" service "c" and org "a" service "b-c" would share `svc-a-b-c`, one organization replacing
 * the other's objects), and shortened to fit a Service name (a 63-character DNS label): an org id
 * may be 63 characters and a service name 40.
 */
export function serviceObjectName(org: string, name: string): string {
  const readable = `svc-${org}-${name}`.slice(0, DNS_LABEL_MAX - HASH_LENGTH - 1).replace(/-+$/, "");
  return `${readable}-${shortHash(`${org}\n${name}`)}`;
}

/** `<service object name>-<revision>`: the ConfigMap and the Secret of one revision's environment. */
export function revisionObjectName(org: string, name: string, revision: string): string {
  return `${serviceObjectName(org, name)}-${revision}`;
}

/**
 * What the Deployment runs: the rollout's release, except after a failed rollout, when the
 * release that serves (`current`) runs again, so the new replicas that never became ready stop
 * being retried. A first deployment that failed has nothing to go back to and keeps its release.
 */
export function releaseToRun(service: ServiceRecord): Release {
  return service.rollout.phase === "failed" && service.current ? service.current : service.rollout.release;
}

/** The Python scaffold's METRICS_PORT, moved aside in the unlikely case the service's own port is that one. */
export function metricsPort(service: ServiceRecord): number {
  if (service.repo_type === "js") return service.port;
  return service.port === PYTHON_METRICS_PORT ? PYTHON_METRICS_PORT + 1 : PYTHON_METRICS_PORT;
}

export interface ServiceManifestOptions {
  namespace: string;
  /** Secrets holding the credentials of the registry the services' images are pulled from. */
  imagePullSecrets?: string[];
}

function baseLabels(service: ServiceRecord): Record<string, string> {
  return {
    [SERVICE_LABELS.name]: SERVICE_APP_NAME,
    [SERVICE_LABELS.managedBy]: SERVICE_MANAGED_BY,
    [SERVICE_LABELS.org]: service.org,
    [SERVICE_LABELS.service]: service.name,
  };
}

/**
 * Readiness and liveness as the scaffolds serve them: a js service's /readyz (started, database
 * reachable, not draining) and /healthz (the process answers); a Python service's standard gRPC
 * health service, through Kubernetes' native gRPC probe (GA since 1.27), which says SERVING only
 * once it is ready, and for liveness too.
 */
function probes(service: ServiceRecord, deadlineSeconds: number): Record<string, V1Probe> {
  const check = (path: string) =>
    service.repo_type === "js" ? { httpGet: { path, port: service.port } } : { grpc: { port: service.port } };
  return {
    // Liveness only starts once this passed: a replica may take up to the rollout's deadline
    // to start (a Python one waits for its database before it serves health) without being
    // killed for it; past that the rollout fails anyway.
    startupProbe: {
      ...check("/healthz"),
      periodSeconds: STARTUP_PERIOD_SECONDS,
      timeoutSeconds: 2,
      failureThreshold: Math.max(1, Math.ceil(deadlineSeconds / STARTUP_PERIOD_SECONDS)),
    },
    readinessProbe: { ...check("/readyz"), periodSeconds: 5, timeoutSeconds: 3, failureThreshold: 2 },
    livenessProbe: { ...check("/healthz"), periodSeconds: 10, timeoutSeconds: 3, failureThreshold: 3 },
  };
}

/** A content hash of what the backend sends, so "unchanged" costs no write. */
export function specHash(object: { metadata?: { labels?: unknown; annotations?: unknown }; spec?: unknown }): string {
  const annotations = { ...(object.metadata?.annotations as Record<string, string> | undefined) };
  delete annotations[SERVICE_ANNOTATIONS.specHash];
  return shortHash(JSON.stringify({ labels: object.metadata?.labels, annotations, spec: object.spec }));
}

function withHash<T extends { metadata?: { annotations?: Record<string, string> }; spec?: unknown }>(object: T): T {
  object.metadata!.annotations = { ...object.metadata!.annotations, [SERVICE_ANNOTATIONS.specHash]: specHash(object) };
  return object;
}

export function buildServiceDeployment(
  service: ServiceRecord,
  release: Release,
  options: ServiceManifestOptions,
): V1Deployment {
  const name = serviceObjectName(service.org, service.name);
  const envName = revisionObjectName(service.org, service.name, release.revision);
  const selector = baseLabels(service);
  const podLabels = { ...selector, [SERVICE_LABELS.revision]: release.revision };
  const deadlineSeconds = Math.max(1, Math.ceil(service.rollout.deadline_ms / 1000));
  const metrics = metricsPort(service);
  const ports: V1ContainerPort[] = [{ name: "rpc", containerPort: service.port, protocol: "TCP" }];
  if (metrics !== service.port) ports.push({ name: "metrics", containerPort: metrics, protocol: "TCP" });
  // Set after envFrom, so they win over a variable of the same name (src/services/names.ts refuses those anyway).
  const env: V1EnvVar[] = [
    { name: "PORT", value: String(service.port) },
    { name: "HOST", value: "0.0.0.0" },
    ...(service.repo_type === "python" ? [{ name: "METRICS_PORT", value: String(metrics) }] : []),
  ];
  const releaseAnnotations = {
    [SERVICE_ANNOTATIONS.tag]: release.tag,
    [SERVICE_ANNOTATIONS.digest]: release.digest,
  };
  return withHash<V1Deployment>({
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: {
      name,
      namespace: options.namespace,
      labels: podLabels,
      // The rollout id lives here and not on the pod template: a failed rollout's Deployment goes
      // back to exactly the template that served, so Kubernetes scales the old ReplicaSet back up
      // instead of starting a third one.
      annotations: { ...releaseAnnotations, [SERVICE_ANNOTATIONS.rollout]: String(service.rollout.id) },
    },
    spec: {
      replicas: service.replicas,
      // Undo goes through the record's releases, not Kubernetes' history: keep little of it.
      revisionHistoryLimit: 3,
      // Kubernetes counts it as "no progress for this long"; the rollout fails when it passes.
      progressDeadlineSeconds: deadlineSeconds,
      selector: { matchLabels: selector },
      // A rollout never lowers capacity: a new replica must be ready before an old one stops.
      strategy: { type: "RollingUpdate", rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } },
      template: {
        metadata: {
          labels: podLabels,
          annotations: {
            ...releaseAnnotations,
            "prometheus.io/scrape": "true",
            "prometheus.io/port": String(metrics),
            "prometheus.io/path": "/metrics",
          },
        },
        spec: {
          // A team's code has no business with the Kubernetes API: no token in its pods.
          automountServiceAccountToken: false,
          // No *_SERVICE_HOST variables for every Service in the namespace: they would leak the
          // platform's own addresses into the team's environment and may clash with its names.
          enableServiceLinks: false,
          terminationGracePeriodSeconds: 30,
          ...(options.imagePullSecrets?.length
            ? { imagePullSecrets: options.imagePullSecrets.map((n) => ({ name: n })) }
            : {}),
          // The scaffolds' images name a numeric non-root USER (1000, 10001): runAsNonRoot makes
          // the kubelet refuse an image that would run as root, without choosing the uid for it.
          securityContext: { runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } },
          containers: [
            {
              name: SERVICE_CONTAINER,
              // Pinned by digest: the tag may be pushed again, the rollout runs what was published.
              image: `${service.image_repository}@${release.digest}`,
              // Always: the kubelet asks the registry with this pod's credentials at every start,
              // so an image cached on the node (pulled for another organization) never runs for
              // one whose own pull would be refused (docs/security.md, "Outbound calls a tenant names").
              imagePullPolicy: "Always",
              ports,
              // The ConfigMap first: a secret of the same name as a variable wins (EnvironmentParts).
              envFrom: [{ configMapRef: { name: envName } }, { secretRef: { name: envName } }],
              env,
              // Requests: what an idle small service uses, so many fit on a node. A memory limit
              // so a leak restarts this replica rather than starving its neighbours; no CPU limit,
              // since CFS throttling shows up as latency spikes while spare CPU sits idle.
              resources: { requests: { cpu: "100m", memory: "128Mi" }, limits: { memory: "512Mi" } },
              ...probes(service, deadlineSeconds),
              securityContext: {
                allowPrivilegeEscalation: false,
                capabilities: { drop: ["ALL"] },
                // Writable: the team's image may write beside its code (Prisma's engines, Python's
                // bytecode cache, temporary files) and the platform cannot know where.
                readOnlyRootFilesystem: false,
              },
            },
          ],
        },
      },
    },
  });
}

/**
 * The environment of one revision: a ConfigMap of its variables and a Secret of its secrets,
 * both immutable, since a rollout's environment never changes under its running pods (a later
 * change is a new revision with objects of its own), and immutable objects cost the API server
 * no watch.
 */
export function buildServiceEnvironment(
  service: ServiceRecord,
  revision: string,
  parts: EnvironmentParts,
  options: ServiceManifestOptions,
): { configMap: V1ConfigMap; secret: V1Secret } {
  const metadata = () => ({
    name: revisionObjectName(service.org, service.name, revision),
    namespace: options.namespace,
    labels: { ...baseLabels(service), [SERVICE_LABELS.revision]: revision },
  });
  const sorted = (values: Record<string, string>) =>
    Object.fromEntries(Object.entries(values).sort(([a], [b]) => a.localeCompare(b)));
  return {
    configMap: { apiVersion: "v1", kind: "ConfigMap", metadata: metadata(), immutable: true, data: sorted(parts.env) },
    secret: {
      apiVersion: "v1",
      kind: "Secret",
      metadata: metadata(),
      type: "Opaque",
      immutable: true,
      stringData: sorted(parts.secrets),
    },
  };
}

/** `<service object name>-pull`: the service's image-pull Secret (revisions are `r<id>`, so never the same name). */
export function pullSecretName(org: string, name: string): string {
  return `${serviceObjectName(org, name)}-pull`;
}

/** The pull Secret's `app.kubernetes.io/name`: not SERVICES_SELECTOR's, so collecting a service's revisions leaves it alone. */
export const PULL_SECRET_APP_NAME = "platform-service-pull";

/**
 * The service's image-pull credential as a `kubernetes.io/dockerconfigjson` Secret
 * (docs/services.md, "Pulling from a private registry"): the organization's own credential for
 * the image's registry, or the platform's pull grant for its repository. One per service, named
 * only in that service's Deployment (`imagePullSecrets`), so only the kubelet pulling that
 * organization's pods uses it; no pod reads Secrets (no service account token). Mutable: a grant
 * is renewed in place.
 */
export function buildPullSecret(
  service: ServiceRecord,
  dockerConfigJson: string,
  options: ServiceManifestOptions,
): V1Secret {
  return {
    apiVersion: "v1",
    kind: "Secret",
    metadata: {
      name: pullSecretName(service.org, service.name),
      namespace: options.namespace,
      labels: { ...baseLabels(service), [SERVICE_LABELS.name]: PULL_SECRET_APP_NAME },
    },
    type: "kubernetes.io/dockerconfigjson",
    stringData: { ".dockerconfigjson": dockerConfigJson },
  };
}

/** A stable in-cluster address for the service, across every ready replica of any revision. */
export function buildServiceService(service: ServiceRecord, options: ServiceManifestOptions): V1Service {
  return withHash<V1Service>({
    apiVersion: "v1",
    kind: "Service",
    metadata: {
      name: serviceObjectName(service.org, service.name),
      namespace: options.namespace,
      labels: baseLabels(service),
      annotations: {},
    },
    spec: {
      type: "ClusterIP",
      selector: baseLabels(service),
      ports: [
        {
          name: "rpc",
          port: service.port,
          targetPort: "rpc",
          protocol: "TCP",
          // Python services speak gRPC: HTTP/2 without TLS from the first byte. Connect (js) serves HTTP/1.1 and h2c.
          appProtocol: service.repo_type === "python" ? "kubernetes.io/h2c" : "http",
        },
      ],
    },
  });
}
