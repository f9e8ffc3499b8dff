/**
 * The worker Deployment for one endpoint-version, as a pure function of the
 * endpoint record and the backend's options. Kept apart from the API calls so
 * every manifest the backend can send is unit-testable and schema-validated.
 */
import { createHash } from "node:crypto";
import type {
  V1Deployment,
  V1EnvVar,
  V1EnvFromSource,
  V1Probe,
  V1Toleration,
  V1Volume,
  V1VolumeMount,
} from "@kubernetes/client-node";
import type { Framework } from "../../../src/contracts/deployment.ts";
import type { Endpoint } from "../../../src/endpoints/record.ts";
import { revisionId } from "../../../src/endpoints/rollout.ts";
import { WORKER_ALLOCATOR_ENV, WORKER_HEALTH_PORT, WORKER_NODE_FLAGS } from "../../../src/process/worker-env.ts";

export const WORKER_APP_NAME = "platform-worker";
export const MANAGED_BY = "platform-scaler";

/** Label keys on every worker Deployment and its pods. */
export const LABELS = {
  name: "app.kubernetes.io/name",
  component: "app.kubernetes.io/component",
  managedBy: "app.kubernetes.io/managed-by",
  endpoint: "platform/endpoint",
  model: "platform/model",
  version: "platform/version",
  revision: "platform/revision",
} as const;

/**
 * Annotation keys. Label values must be DNS-label-like, so the exact endpoint
 * name lives in an annotation and lookups compare against it.
 */
export const ANNOTATIONS = {
  endpoint: "platform/endpoint",
  model: "platform/model",
  version: "platform/version",
  revision: "platform/revision",
  specHash: "platform/spec-hash",
  /**
   * Set to "external" on a live Deployment (`kubectl annotate`) when another
   * autoscaler such as KEDA owns its replica count: the backend then leaves
   * `spec.replicas` alone. See deploy/README.md, "KEDA".
   */
  replicas: "platform/replicas",
} as const;

export const EXTERNAL_REPLICAS = "external";

/**
 * NVIDIA GPU feature discovery (part of the GPU operator) labels nodes with
 * `nvidia.com/gpu.product`, e.g. "NVIDIA-A100-SXM4-80GB". Managed clusters use
 * their own: GKE `cloud.google.com/gke-accelerator` ("nvidia-tesla-a100"),
 * EKS `k8s.amazonaws.com/accelerator`. `resources.gpu_type` is matched verbatim.
 */
export const DEFAULT_GPU_TYPE_LABEL = "nvidia.com/gpu.product";

export interface WorkerDeploymentOptions {
  namespace: string;
  /** The platform image; its ENTRYPOINT is `node /app/bin/platform.js`. */
  image: string;
  /**
   * A different image per engine: `vllm` is deploy/vllm-worker.Dockerfile's image
   * (PLATFORM_VLLM_WORKER_IMAGE), which has vLLM and the same ENTRYPOINT as `image`.
   */
  imageByFramework?: Partial<Record<Framework, string>>;
  imagePullPolicy?: "Always" | "IfNotPresent" | "Never";
  imagePullSecrets?: string[];
  /** ConfigMap with REDIS_URL, PLATFORM_PREFIX, PLATFORM_ARTIFACTS_URL. */
  configMapName?: string;
  /** Secret with the AWS_* credentials for the artifact store (optional at run time). */
  secretName?: string;
  /** Secret and key holding the Redis password, given to workers as REDIS_PASSWORD by reference, never copied into the spec. */
  redisPasswordSecret?: { name: string; key: string };
  /** Extra environment, applied after the ConfigMap and Secret. */
  env?: Record<string, string>;
  /** Extra labels for the Deployment and its pods (e.g. cost allocation). */
  labels?: Record<string, string>;
  serviceAccountName?: string;
  gpuTypeLabel?: string;
  /** Time a worker gets to drain in-flight jobs after SIGTERM. */
  terminationGracePeriodSeconds?: number;
  /** How long a replica may take to load its model and warm up before it is restarted. */
  startupTimeoutSeconds?: number;
}

const DNS_LABEL_MAX = 63;
const HASH_LENGTH = 8;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const STARTUP_PERIOD_SECONDS = 5;

function shortHash(text: string): string {
  return createHash("sha256").update(text).digest("hex").slice(0, HASH_LENGTH);
}

function dnsLabelPart(text: string, maxLength: number): string {
  return text
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, "-")
    .replace(/-+/g, "-")
    .slice(0, maxLength)
    .replace(/^-+|-+$/g, "");
}

/**
 * `platform-worker-<endpoint>-<version>-<hash>`, one per revision of the endpoint (what its
 * replicas load, src/endpoints/rollout.ts): always suffixed, because sanitising is lossy ("a.b"
 * and "a-b") and the dash is ambiguous (endpoint "a" version "b-v1" vs endpoint "a-b" version "v1").
 */
export function workerDeploymentName(endpoint: string, version: string, revision: string): string {
  const readable = dnsLabelPart(`${WORKER_APP_NAME}-${endpoint}-${version}`, DNS_LABEL_MAX - HASH_LENGTH - 1);
  return `${readable}-${shortHash(`${endpoint}\n${version}\n${revision}`)}`;
}

/** The value itself when Kubernetes accepts it as a label value, else a sanitised form with a hash. */
export function labelValue(text: string): string {
  if (text.length <= DNS_LABEL_MAX && LABEL_VALUE.test(text)) return text;
  const readable = text
    .replace(/[^A-Za-z0-9_.-]+/g, "-")
    .slice(0, DNS_LABEL_MAX - HASH_LENGTH - 1)
    .replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, "");
  return readable.length > 0 ? `${readable}-${shortHash(text)}` : shortHash(text);
}

/** Every worker Deployment this scaler manages, whatever the endpoint. */
export const WORKERS_SELECTOR = `${LABELS.name}=${WORKER_APP_NAME},${LABELS.managedBy}=${MANAGED_BY}`;

function httpProbe(path: string, periodSeconds: number, failureThreshold: number): V1Probe {
  return {
    httpGet: { path, port: WORKER_HEALTH_PORT },
    periodSeconds,
    timeoutSeconds: 3,
    failureThreshold,
  };
}

export const GPU_RESOURCE = "nvidia.com/gpu";

/**
 * GPUs a replica asks the scheduler for. llama.cpp: `resources.gpu` (none when unset: it runs
 * on the CPU). vLLM's image runs on CUDA only, so an unset `resources.gpu` means the GPUs
 * `vllm serve` will use: `runtime.tensor_parallel_size`, else one. An explicit 0 is kept.
 */
export function workerGpus(endpoint: Endpoint): number {
  const { resources: r, runtime } = endpoint.config;
  if (endpoint.framework === "vllm") return r.gpu ?? runtime.tensor_parallel_size ?? 1;
  return r.gpu ?? 0;
}

/**
 * The processes `vllm serve` runs GPUs with, one per tensor-parallel rank: what
 * workers/engines/vllm-flags.ts passes as --tensor-parallel-size (the field, else every GPU).
 */
function vllmRanks(endpoint: Endpoint): number {
  return Math.max(1, endpoint.config.runtime.tensor_parallel_size ?? workerGpus(endpoint));
}

const MI_PER_GI = 1024;

function toMi(quantity: string): number {
  const n = Number.parseFloat(quantity);
  return quantity.endsWith("Gi") ? n * MI_PER_GI : n;
}

/**
 * /dev/shm for a vLLM replica: 1Gi, plus 1Gi per tensor-parallel rank, so one GPU gets the 2Gi
 * of vLLM's own Kubernetes example. vLLM's ranks are separate processes: the engine broadcasts
 * each step to them through a shared-memory ring buffer, PyTorch passes tensors between
 * processes there, and NCCL falls back to its shared-memory transport between GPUs without
 * peer-to-peer access, its buffers growing with the number of peers. A container's default is
 * 64Mi, where that fails with a bus error. The pages count against the pod's memory limit, so
 * never more than `resources.memory`.
 */
export function vllmShmSizeLimit(endpoint: Endpoint): string {
  const wanted = `${1 + vllmRanks(endpoint)}Gi`;
  const memory = endpoint.config.resources.memory;
  return memory !== undefined && toMi(memory) < toMi(wanted) ? memory : wanted;
}

function containerResources(endpoint: Endpoint) {
  const r = endpoint.config.resources;
  const requests: Record<string, string> = {};
  const limits: Record<string, string> = {};
  // Requests equal limits: the worker sizes its thread pool from resources.cpu,
  // so the quota has to match it or generation gets throttled.
  if (r.cpu !== undefined) requests.cpu = limits.cpu = String(r.cpu);
  if (r.memory !== undefined) requests.memory = limits.memory = r.memory;
  const gpus = workerGpus(endpoint);
  if (gpus > 0) {
    limits[GPU_RESOURCE] = String(gpus);
    // Kubernetes fills in an extended resource's request from its limit; vLLM's manifests say it
    // outright. llama.cpp's stay as they were, so their spec hash (and running pods) do not change.
    if (endpoint.framework === "vllm") requests[GPU_RESOURCE] = limits[GPU_RESOURCE];
  }
  return {
    ...(Object.keys(requests).length > 0 ? { requests } : {}),
    ...(Object.keys(limits).length > 0 ? { limits } : {}),
  };
}

function gpuPlacement(endpoint: Endpoint, options: WorkerDeploymentOptions) {
  const r = endpoint.config.resources;
  const gpus = workerGpus(endpoint);
  const out: { nodeSelector?: Record<string, string>; tolerations?: V1Toleration[] } = {};
  if (r.gpu_type !== undefined) {
    if (r.gpu_type.length > DNS_LABEL_MAX || !LABEL_VALUE.test(r.gpu_type)) {
      throw new Error(
        `resources.gpu_type: "${r.gpu_type}" cannot be matched against node label ${options.gpuTypeLabel ?? DEFAULT_GPU_TYPE_LABEL} (expected a Kubernetes label value)`,
      );
    }
    out.nodeSelector = { [options.gpuTypeLabel ?? DEFAULT_GPU_TYPE_LABEL]: r.gpu_type };
  }
  // GPU node pools are commonly tainted so that only GPU workloads land there.
  if (gpus > 0) out.tolerations = [{ key: GPU_RESOURCE, operator: "Exists", effect: "NoSchedule" }];
  return out;
}

function volumes(endpoint: Endpoint): { volumes: V1Volume[]; mounts: V1VolumeMount[] } {
  const vols: V1Volume[] = [
    { name: "data", emptyDir: {} },
    { name: "tmp", emptyDir: {} },
  ];
  const mounts: V1VolumeMount[] = [
    { name: "data", mountPath: "/data" },
    { name: "tmp", mountPath: "/tmp" },
  ];
  // vLLM's tensor-parallel processes exchange data through /dev/shm, 64Mi by default (vllmShmSizeLimit).
  // llama.cpp GPU replicas keep the unsized mount they always had, so their Deployments do not roll.
  if (endpoint.framework === "vllm") {
    vols.push({ name: "dshm", emptyDir: { medium: "Memory", sizeLimit: vllmShmSizeLimit(endpoint) } });
    mounts.push({ name: "dshm", mountPath: "/dev/shm" });
  } else if ((endpoint.config.resources.gpu ?? 0) > 0) {
    vols.push({ name: "dshm", emptyDir: { medium: "Memory" } });
    mounts.push({ name: "dshm", mountPath: "/dev/shm" });
  }
  return { volumes: vols, mounts };
}

function environment(options: WorkerDeploymentOptions): { env: V1EnvVar[]; envFrom: V1EnvFromSource[] } {
  const envFrom: V1EnvFromSource[] = [];
  if (options.configMapName) envFrom.push({ configMapRef: { name: options.configMapName } });
  // Optional: clusters with workload identity (IRSA, GKE) need no key Secret.
  if (options.secretName) envFrom.push({ secretRef: { name: options.secretName, optional: true } });
  const env: V1EnvVar[] = [
    { name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
    { name: "PLATFORM_DATA_DIR", value: "/data" },
    { name: "NODE_OPTIONS", value: WORKER_NODE_FLAGS.join(" ") },
    // Optional like the other Secret: an external Redis may carry its password in REDIS_URL instead.
    ...(options.redisPasswordSecret
      ? [
          {
            name: "REDIS_PASSWORD",
            valueFrom: {
              secretKeyRef: {
                name: options.redisPasswordSecret.name,
                key: options.redisPasswordSecret.key,
                optional: true,
              },
            },
          },
        ]
      : []),
    // The allocator's defaults, unless the options set those variables themselves (one name, one entry).
    ...Object.entries({ ...WORKER_ALLOCATOR_ENV, ...options.env })
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([name, value]) => ({ name, value })),
  ];
  return { env, envFrom };
}

/**
 * A content hash of everything but the replica count, so the backend can tell
 * "the endpoint's config changed, replace the spec" from "only scale".
 */
export function workerSpecHash(deployment: V1Deployment): string {
  const { replicas: _replicas, ...spec } = deployment.spec ?? ({} as NonNullable<V1Deployment["spec"]>);
  const annotations = { ...deployment.metadata?.annotations };
  delete annotations[ANNOTATIONS.specHash];
  return shortHash(JSON.stringify({ labels: deployment.metadata?.labels, annotations, spec }));
}

export function buildWorkerDeployment(
  endpoint: Endpoint,
  replicas: number,
  options: WorkerDeploymentOptions,
): V1Deployment {
  if (!Number.isInteger(replicas) || replicas < 0)
    throw new Error(`replicas: expected a non-negative integer, got ${replicas}`);
  const revision = revisionId(endpoint);
  const name = workerDeploymentName(endpoint.name, endpoint.version, revision);
  const selector = {
    [LABELS.name]: WORKER_APP_NAME,
    [LABELS.endpoint]: labelValue(endpoint.name),
    [LABELS.version]: labelValue(endpoint.version),
    [LABELS.revision]: revision,
  };
  const labels = {
    ...options.labels,
    ...selector,
    [LABELS.component]: "worker",
    [LABELS.managedBy]: MANAGED_BY,
    [LABELS.model]: labelValue(endpoint.config.model.name),
  };
  const annotations = {
    [ANNOTATIONS.endpoint]: endpoint.name,
    [ANNOTATIONS.model]: endpoint.config.model.name,
    [ANNOTATIONS.version]: endpoint.version,
    [ANNOTATIONS.revision]: revision,
  };
  const grace = options.terminationGracePeriodSeconds ?? 60;
  const startupTimeout = options.startupTimeoutSeconds ?? 900;
  const { env, envFrom } = environment(options);
  const { volumes: vols, mounts } = volumes(endpoint);
  const resources = containerResources(endpoint);

  const deployment: V1Deployment = {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name, namespace: options.namespace, labels, annotations },
    spec: {
      replicas,
      revisionHistoryLimit: 2,
      selector: { matchLabels: selector },
      // A config change within one version must not drop capacity: surge first.
      strategy: { type: "RollingUpdate", rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
      template: {
        // The prometheus.io annotations serve annotation-based scrape configs; deploy/prometheus/ selects by label and port.
        metadata: {
          labels,
          annotations: {
            ...annotations,
            "prometheus.io/scrape": "true",
            "prometheus.io/port": String(WORKER_HEALTH_PORT),
            "prometheus.io/path": "/metrics",
          },
        },
        spec: {
          ...(options.serviceAccountName ? { serviceAccountName: options.serviceAccountName } : {}),
          // Workers talk to Redis and the artifact store, never to the Kubernetes API.
          automountServiceAccountToken: false,
          enableServiceLinks: false,
          terminationGracePeriodSeconds: grace,
          ...(options.imagePullSecrets?.length
            ? { imagePullSecrets: options.imagePullSecrets.map((n) => ({ name: n })) }
            : {}),
          securityContext: {
            runAsNonRoot: true,
            runAsUser: 1000,
            runAsGroup: 1000,
            fsGroup: 1000,
            seccompProfile: { type: "RuntimeDefault" },
          },
          ...gpuPlacement(endpoint, options),
          containers: [
            {
              name: "worker",
              image: options.imageByFramework?.[endpoint.framework] ?? options.image,
              ...(options.imagePullPolicy ? { imagePullPolicy: options.imagePullPolicy } : {}),
              // $(POD_NAME) is expanded by the kubelet: heartbeats in Redis then name the pod.
              args: [
                "worker",
                "--endpoint",
                endpoint.name,
                "--revision",
                revision,
                "--health-port",
                String(WORKER_HEALTH_PORT),
                "--replica-id",
                "$(POD_NAME)",
              ],
              ports: [{ name: "health", containerPort: WORKER_HEALTH_PORT, protocol: "TCP" }],
              env,
              ...(envFrom.length > 0 ? { envFrom } : {}),
              ...(Object.keys(resources).length > 0 ? { resources } : {}),
              // Gates the other probes until the model is loaded and a warm-up inference ran.
              startupProbe: httpProbe(
                "/readyz",
                STARTUP_PERIOD_SECONDS,
                Math.ceil(startupTimeout / STARTUP_PERIOD_SECONDS),
              ),
              readinessProbe: httpProbe("/readyz", 5, 2),
              livenessProbe: httpProbe("/livez", 10, 3),
              volumeMounts: mounts,
              securityContext: {
                allowPrivilegeEscalation: false,
                capabilities: { drop: ["ALL"] },
              },
            },
          ],
          volumes: vols,
        },
      },
    },
  };
  deployment.metadata!.annotations = { ...annotations, [ANNOTATIONS.specHash]: workerSpecHash(deployment) };
  return deployment;
}
