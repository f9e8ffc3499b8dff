import { KubeConfig } from "@kubernetes/client-node";
import { Deployment } from "kubernetes-models/apps/v1/Deployment";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { DeploymentConfig, type DeploymentConfigInput } from "../../src/contracts/deployment.ts";
import { Endpoint } from "../../src/endpoints/record.ts";
import { revisionId, withUpdate } from "../../src/endpoints/rollout.ts";
import {
  ANNOTATIONS,
  DEFAULT_GPU_TYPE_LABEL,
  EXTERNAL_REPLICAS,
  LABELS,
  buildWorkerDeployment,
  labelValue,
  vllmShmSizeLimit,
  workerDeploymentName,
  workerGpus,
  type WorkerDeploymentOptions,
} from "../../scaler/backends/endpoints/kubernetes-manifests.ts";
import { KubernetesBackend } from "../../scaler/backends/endpoints/kubernetes.ts";
import { KubernetesApiError } from "../../scaler/backends/kubernetes-api.ts";
import { loadSettings } from "../../src/settings/index.ts";
import type { ReplicaBackend } from "../../scaler/backends/endpoints/backend.ts";
import { WORKER_ALLOCATOR_ENV } from "../../src/process/worker-env.ts";
import { FakeKubernetesApi } from "../helpers/fake-kubernetes-api.ts";

const DNS_1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const NAMESPACE = "team-a";
const IMAGE = "registry.example.com/platform:1.2.3";

function endpoint(name: string, version: string, config: Partial<DeploymentConfigInput> = {}): Endpoint {
  return Endpoint.parse({
    name,
    config: DeploymentConfig.parse({ endpoint: name, model: { name: "stories", version }, ...config }),
    version,
    framework: "llamacpp",
    desired_replicas: 1,
    created: 1,
    updated: 1,
  });
}

/** A `framework: vllm` endpoint, as `inference deploy` records it. */
function vllmEndpoint(name: string, version: string, config: Partial<DeploymentConfigInput> = {}): Endpoint {
  const record = endpoint(name, version, { ...config, model: { name: "stories", version, framework: "vllm" } });
  return Endpoint.parse({ ...record, framework: "vllm" });
}

const VLLM_IMAGE = "registry.example.com/platform-vllm:1.2.3";
/** The worker command for `e`: its endpoint and the revision this Deployment runs (src/endpoints/rollout.ts). */
const WORKER_ARGS = (e: Endpoint) => [
  "worker",
  "--endpoint",
  e.name,
  "--revision",
  revisionId(e),
  "--health-port",
  "8081",
  "--replica-id",
  "$(POD_NAME)",
];

const options: WorkerDeploymentOptions = {
  namespace: NAMESPACE,
  image: IMAGE,
  configMapName: "platform-config",
  secretName: "platform-secrets",
  redisPasswordSecret: { name: "platform-redis", key: "password" },
};

/** Schema validation against the real Kubernetes OpenAPI, plus the name and label rules the schema leaves out. */
function expectValidDeployment(object: unknown): void {
  const plain = JSON.parse(JSON.stringify(object));
  expect(() => new Deployment(plain).validate()).not.toThrow();
  expect(plain.metadata.name).toMatch(DNS_1123_LABEL);
  expect(plain.metadata.name.length).toBeLessThanOrEqual(63);
  for (const labels of [plain.metadata.labels, plain.spec.template.metadata.labels]) {
    for (const value of Object.values(labels as Record<string, string>)) {
      expect(value).toMatch(LABEL_VALUE);
      expect(value.length).toBeLessThanOrEqual(63);
    }
  }
}

describe("worker Deployment manifest", () => {
  it("builds a valid CPU worker Deployment with the worker command, env, resources and probes", () => {
    const record = endpoint("chat", "v1", { resources: { cpu: 2, memory: "4Gi" } });
    const d = buildWorkerDeployment(record, 3, options);
    expectValidDeployment(d);
    const pod = d.spec!.template.spec!;
    const container = pod.containers[0]!;
    expect(d.spec!.replicas).toBe(3);
    expect(d.metadata!.namespace).toBe(NAMESPACE);
    expect(d.metadata!.labels).toMatchObject({
      [LABELS.name]: "platform-worker",
      [LABELS.endpoint]: "chat",
      [LABELS.model]: "stories",
      [LABELS.version]: "v1",
    });
    expect(d.spec!.selector.matchLabels).toEqual(
      Object.fromEntries(
        Object.entries(d.spec!.selector.matchLabels!).map(([k]) => [k, d.spec!.template.metadata!.labels![k]]),
      ),
    );
    expect(container.image).toBe(IMAGE);
    expect(container.args).toEqual(WORKER_ARGS(record));
    expect(container.env).toContainEqual({ name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } });
    expect(container.envFrom).toEqual([
      { configMapRef: { name: "platform-config" } },
      { secretRef: { name: "platform-secrets", optional: true } },
    ]);
    // The Redis password by reference only: the spec (and the API server's copy of it) never holds it.
    expect(container.env).toContainEqual({
      name: "REDIS_PASSWORD",
      valueFrom: { secretKeyRef: { name: "platform-redis", key: "password", optional: true } },
    });
    expect(container.env!.every((e) => e.value === undefined || !/password/i.test(e.name))).toBe(true);
    // The worker's allocator settings (scaler/backends/endpoints/backend.ts), as the local backend gives them too.
    for (const [name, value] of Object.entries(WORKER_ALLOCATOR_ENV))
      expect(container.env).toContainEqual({ name, value });
    expect(container.resources).toEqual({ requests: { cpu: "2", memory: "4Gi" }, limits: { cpu: "2", memory: "4Gi" } });
    expect(container.startupProbe?.httpGet).toEqual({ path: "/readyz", port: 8081 });
    expect(container.readinessProbe?.httpGet).toEqual({ path: "/readyz", port: 8081 });
    expect(container.livenessProbe?.httpGet).toEqual({ path: "/livez", port: 8081 });
    expect(container.startupProbe!.periodSeconds! * container.startupProbe!.failureThreshold!).toBeGreaterThanOrEqual(
      600,
    );
    expect(pod.terminationGracePeriodSeconds).toBe(60);
    expect(pod.securityContext?.runAsNonRoot).toBe(true);
    expect(pod.nodeSelector).toBeUndefined();
    expect(pod.tolerations).toBeUndefined();
  });

  it("lets the scaler's worker env override an allocator default, with one entry per name", () => {
    const d = buildWorkerDeployment(endpoint("chat", "v1"), 1, { ...options, env: { MALLOC_ARENA_MAX: "4" } });
    const arenas = d.spec!.template.spec!.containers[0]!.env!.filter((e) => e.name === "MALLOC_ARENA_MAX");
    expect(arenas).toEqual([{ name: "MALLOC_ARENA_MAX", value: "4" }]);
    expectValidDeployment(d);
  });

  it("asks for GPUs, tolerates the GPU taint and selects nodes by gpu_type", () => {
    const d = buildWorkerDeployment(
      endpoint("big", "v7", { resources: { gpu: 2, gpu_type: "NVIDIA-A100-SXM4-80GB", cpu: 8, memory: "64Gi" } }),
      1,
      options,
    );
    expectValidDeployment(d);
    const pod = d.spec!.template.spec!;
    expect(pod.containers[0]!.resources!.limits).toMatchObject({ "nvidia.com/gpu": "2" });
    expect(pod.nodeSelector).toEqual({ [DEFAULT_GPU_TYPE_LABEL]: "NVIDIA-A100-SXM4-80GB" });
    expect(pod.tolerations).toEqual([{ key: "nvidia.com/gpu", operator: "Exists", effect: "NoSchedule" }]);
    // A llama.cpp replica as before this backend knew vLLM: the GPU as a limit only, an unsized /dev/shm.
    expect(pod.containers[0]!.resources!.requests).not.toHaveProperty("nvidia.com/gpu");
    expect(pod.volumes!.find((v) => v.name === "dshm")!.emptyDir).toEqual({ medium: "Memory" });
  });

  it("uses the configured node label for gpu_type, and a GPU count without a type", () => {
    const typed = buildWorkerDeployment(endpoint("g", "v1", { resources: { gpu_type: "nvidia-tesla-t4" } }), 1, {
      ...options,
      gpuTypeLabel: "cloud.google.com/gke-accelerator",
    });
    expectValidDeployment(typed);
    expect(typed.spec!.template.spec!.nodeSelector).toEqual({ "cloud.google.com/gke-accelerator": "nvidia-tesla-t4" });
    const untyped = buildWorkerDeployment(endpoint("g", "v1", { resources: { gpu: 1 } }), 0, options);
    expectValidDeployment(untyped);
    expect(untyped.spec!.template.spec!.nodeSelector).toBeUndefined();
    expect(untyped.spec!.replicas).toBe(0);
  });

  it("rejects a gpu_type that no node label can carry, naming the field", () => {
    expect(() =>
      buildWorkerDeployment(endpoint("g", "v1", { resources: { gpu: 1, gpu_type: "A100 80GB" } }), 1, options),
    ).toThrow(/resources\.gpu_type/);
  });

  it("names Deployments deterministically, within 63 characters, and without collisions", () => {
    expect(workerDeploymentName("chat", "v1", "r1")).toBe(workerDeploymentName("chat", "v1", "r1"));
    expect(workerDeploymentName("chat", "v1", "r1")).toMatch(/^platform-worker-chat-v1-[0-9a-f]{8}$/);
    expect(workerDeploymentName("a", "b-v1", "r1")).not.toBe(workerDeploymentName("a-b", "v1", "r1"));
    expect(workerDeploymentName("A.b", "v1", "r1")).not.toBe(workerDeploymentName("a-b", "v1", "r1"));
    // An update of the same version (quantization, context length, ...) is a Deployment of its own.
    expect(workerDeploymentName("chat", "v1", "r1")).not.toBe(workerDeploymentName("chat", "v1", "r2"));
    const longName = `Model_${"x".repeat(57)}`;
    const longVersion = `v${"9".repeat(62)}`;
    const name = workerDeploymentName(longName, longVersion, "r1");
    expect(name.length).toBeLessThanOrEqual(63);
    expect(name).toMatch(DNS_1123_LABEL);
    expect(workerDeploymentName(longName, `${longVersion.slice(0, -1)}8`, "r1")).not.toBe(name);
    expectValidDeployment(buildWorkerDeployment(endpoint(longName, longVersion), 1, options));
  });

  it("keeps valid label values and rewrites the ones Kubernetes would refuse", () => {
    expect(labelValue("chat.v1_x")).toBe("chat.v1_x");
    for (const raw of ["ends-with-dash-", "trailing.", `${"y".repeat(70)}`]) {
      const value = labelValue(raw);
      expect(value).toMatch(LABEL_VALUE);
      expect(value.length).toBeLessThanOrEqual(63);
      expect(value).not.toBe(labelValue(`${raw}z`));
    }
    expectValidDeployment(buildWorkerDeployment(endpoint("odd-", "v1."), 1, options));
  });

  it("uses the vLLM image for vLLM endpoints when one is configured", () => {
    const record = { ...endpoint("g", "v1"), framework: "vllm" as const };
    const d = buildWorkerDeployment(record, 1, {
      ...options,
      imageByFramework: { vllm: "example.com/platform-vllm:1" },
    });
    expect(d.spec!.template.spec!.containers[0]!.image).toBe("example.com/platform-vllm:1");
  });
});

describe("vLLM worker Deployment manifest", () => {
  const vllmOptions: WorkerDeploymentOptions = { ...options, imageByFramework: { vllm: VLLM_IMAGE } };

  it("runs the vLLM image's worker with GPUs requested and limited, on gpu_type nodes, tolerating the GPU taint, with a sized /dev/shm", () => {
    const record = vllmEndpoint("big", "v7", {
      runtime: { tensor_parallel_size: 2 },
      resources: { gpu: 2, gpu_type: "NVIDIA-H100-80GB-HBM3", cpu: 8, memory: "64Gi" },
    });
    const d = buildWorkerDeployment(record, 1, vllmOptions);
    expectValidDeployment(d);
    const pod = d.spec!.template.spec!;
    const container = pod.containers[0]!;
    expect(container.image).toBe(VLLM_IMAGE);
    // The image's ENTRYPOINT is the platform's (deploy/vllm-worker.Dockerfile): `worker` starts `vllm serve` itself.
    expect(container.command).toBeUndefined();
    expect(container.args).toEqual(WORKER_ARGS(record));
    expect(container.resources).toEqual({
      requests: { cpu: "8", memory: "64Gi", "nvidia.com/gpu": "2" },
      limits: { cpu: "8", memory: "64Gi", "nvidia.com/gpu": "2" },
    });
    expect(pod.nodeSelector).toEqual({ [DEFAULT_GPU_TYPE_LABEL]: "NVIDIA-H100-80GB-HBM3" });
    expect(pod.tolerations).toEqual([{ key: "nvidia.com/gpu", operator: "Exists", effect: "NoSchedule" }]);
    // 1Gi + 1Gi per tensor-parallel rank, memory-backed: NCCL and vLLM's ranks share tensors there.
    expect(pod.volumes).toContainEqual({ name: "dshm", emptyDir: { medium: "Memory", sizeLimit: "3Gi" } });
    expect(container.volumeMounts).toContainEqual({ name: "dshm", mountPath: "/dev/shm" });
    // The same pod contract as every worker: non-root, probes on the health port, nothing privileged.
    expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 1000 });
    expect(container.securityContext).toEqual({ allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } });
    expect(container.startupProbe?.httpGet).toEqual({ path: "/readyz", port: 8081 });
  });

  it("sizes GPUs and /dev/shm from the tensor-parallel size, bounded by resources.memory", () => {
    const cases: { config: Partial<DeploymentConfigInput>; gpus: number; shm: string }[] = [
      // vLLM's image needs CUDA: no resources.gpu still means one GPU, as `vllm serve` will use.
      { config: {}, gpus: 1, shm: "2Gi" },
      { config: { runtime: { tensor_parallel_size: 4 } }, gpus: 4, shm: "5Gi" },
      // Every GPU of the replica is a rank when tensor_parallel_size is unset (workers/engines/vllm-flags.ts).
      { config: { resources: { gpu: 8 } }, gpus: 8, shm: "9Gi" },
      { config: { runtime: { tensor_parallel_size: 4 }, resources: { memory: "3Gi" } }, gpus: 4, shm: "3Gi" },
      { config: { resources: { gpu: 2, memory: "2560Mi" } }, gpus: 2, shm: "2560Mi" },
      { config: { resources: { memory: "16Gi" } }, gpus: 1, shm: "2Gi" },
    ];
    for (const { config, gpus, shm } of cases) {
      const record = vllmEndpoint("g", "v1", config);
      expect(workerGpus(record), JSON.stringify(config)).toBe(gpus);
      expect(vllmShmSizeLimit(record), JSON.stringify(config)).toBe(shm);
      const d = buildWorkerDeployment(record, 1, vllmOptions);
      expectValidDeployment(d);
      const pod = d.spec!.template.spec!;
      expect(pod.containers[0]!.resources!.limits!["nvidia.com/gpu"]).toBe(String(gpus));
      expect(pod.containers[0]!.resources!.requests!["nvidia.com/gpu"]).toBe(String(gpus));
      expect(pod.tolerations).toHaveLength(1);
      expect(pod.volumes!.find((v) => v.name === "dshm")!.emptyDir).toEqual({ medium: "Memory", sizeLimit: shm });
      expect(pod.nodeSelector).toBeUndefined();
    }
    // An explicit 0 is the operator's to make: no GPU, no GPU toleration.
    const none = buildWorkerDeployment(vllmEndpoint("g", "v1", { resources: { gpu: 0 } }), 1, vllmOptions).spec!
      .template.spec!;
    expect(none.containers[0]!.resources).toBeUndefined();
    expect(none.tolerations).toBeUndefined();
  });

  it("leaves a llama.cpp endpoint without any of it, with the vLLM image configured", () => {
    const record = endpoint("chat", "v1", { resources: { cpu: 2, memory: "4Gi" } });
    const d = buildWorkerDeployment(record, 1, vllmOptions);
    expectValidDeployment(d);
    const pod = d.spec!.template.spec!;
    const container = pod.containers[0]!;
    expect(container.image).toBe(IMAGE);
    expect(container.command).toBeUndefined();
    expect(container.args).toEqual(WORKER_ARGS(record));
    expect(container.resources).toEqual({ requests: { cpu: "2", memory: "4Gi" }, limits: { cpu: "2", memory: "4Gi" } });
    expect(pod.nodeSelector).toBeUndefined();
    expect(pod.tolerations).toBeUndefined();
    expect(pod.volumes!.map((v) => v.name)).toEqual(["data", "tmp"]);
    expect(container.volumeMounts!.map((m) => m.mountPath)).toEqual(["/data", "/tmp"]);
    // Only the framework differs, yet the Deployments differ, so a framework change rolls the pods.
    const asVllm = buildWorkerDeployment(
      vllmEndpoint("chat", "v1", { resources: { cpu: 2, memory: "4Gi" } }),
      1,
      vllmOptions,
    );
    expect(asVllm.metadata!.annotations![ANNOTATIONS.specHash]).not.toBe(
      d.metadata!.annotations![ANNOTATIONS.specHash],
    );
  });

  it("falls back to the worker image when no vLLM image is configured", () => {
    const d = buildWorkerDeployment(vllmEndpoint("g", "v1"), 1, options);
    expectValidDeployment(d);
    expect(d.spec!.template.spec!.containers[0]!.image).toBe(IMAGE);
  });
});

describe("KubernetesBackend against an API server", () => {
  let api: FakeKubernetesApi;
  let kubeConfig: KubeConfig;

  beforeEach(async () => {
    api = new FakeKubernetesApi();
    const server = await api.start();
    kubeConfig = new KubeConfig();
    kubeConfig.loadFromOptions({
      clusters: [{ name: "fake", server, skipTLSVerify: true }],
      users: [{ name: "scaler", token: "test-token" }],
      contexts: [{ name: "fake", cluster: "fake", user: "scaler", namespace: NAMESPACE }],
      currentContext: "fake",
    });
  });

  afterEach(async () => {
    await api.close();
  });

  /** The Deployment name of a record's own revision. */
  const nameOf = (e: Endpoint) => workerDeploymentName(e.name, e.version, revisionId(e));

  function backend(extra: Partial<ConstructorParameters<typeof KubernetesBackend>[0]> = {}): KubernetesBackend {
    return new KubernetesBackend({
      kubeConfig,
      image: IMAGE,
      configMapName: "platform-config",
      secretName: "platform-secrets",
      redisPasswordSecret: { name: "platform-redis", key: "password" },
      ...extra,
    });
  }

  it("creates, scales, reads readiness, updates on a version change, and deletes", async () => {
    const k8s = backend();
    expect(k8s.namespace).toBe(NAMESPACE);
    const v1 = endpoint("chat", "v1", { resources: { cpu: 2, memory: "2Gi" } });
    const v1Name = workerDeploymentName("chat", "v1", revisionId(v1));

    await k8s.scale(v1, 2);
    const created = api.requests.find((r) => r.method === "POST")!;
    expect(created.path).toBe(`/apis/apps/v1/namespaces/${NAMESPACE}/deployments`);
    expect(created.authorization).toBe("Bearer test-token");
    // What reached the wire is exactly what the builder made: the client dropped no field.
    expect(created.body).toEqual(
      JSON.parse(JSON.stringify(buildWorkerDeployment(v1, 2, { ...options, namespace: NAMESPACE }))),
    );
    expectValidDeployment(created.body);
    expect(api.deploymentNames(NAMESPACE)).toEqual([v1Name]);
    expect(await k8s.observe("chat")).toEqual({ requested: 2, ready: 0 });

    api.requests.length = 0;
    await k8s.scale(v1, 3);
    expect(api.writes()).toEqual([`PATCH /apis/apps/v1/namespaces/${NAMESPACE}/deployments/${v1Name}/scale`]);
    expect(api.requests.find((r) => r.method === "PATCH")!.contentType).toBe("application/merge-patch+json");
    expect(api.deployment(NAMESPACE, v1Name)!.spec.replicas).toBe(3);

    api.requests.length = 0;
    await k8s.scale(v1, 3);
    expect(api.writes()).toEqual([]);

    api.setReady(NAMESPACE, v1Name, 2);
    expect(await k8s.observe("chat")).toEqual({ requested: 3, ready: 2 });

    // A change to what the replicas load (resources here) is a new revision, so a Deployment of
    // its own beside the serving one while the update rolls out (src/endpoints/rollout.ts).
    api.requests.length = 0;
    const v1Bigger = withUpdate(v1, endpoint("chat", "v1", { resources: { cpu: 4, memory: "2Gi" } }), Date.now());
    const biggerName = workerDeploymentName("chat", "v1", revisionId(v1Bigger));
    await k8s.scale(v1Bigger, 3);
    expect(api.writes()).toEqual([`POST /apis/apps/v1/namespaces/${NAMESPACE}/deployments`]);
    expect(api.deploymentNames(NAMESPACE)).toEqual([v1Name, biggerName].sort());
    expect(api.deployment(NAMESPACE, biggerName)!.spec.template.spec.containers[0].resources.limits.cpu).toBe("4");
    expect(api.deployment(NAMESPACE, biggerName)!.spec.template.spec.containers[0].args).toContain(
      revisionId(v1Bigger),
    );
    // Still the same revision, new replica count or labels: the spec is replaced in place.
    api.requests.length = 0;
    await k8s.scale({ ...v1Bigger, config: { ...v1Bigger.config, resources: { ...v1Bigger.config.resources } } }, 3);
    expect(api.writes()).toEqual([]);

    // Rolled out: the earlier revision drains (its Deployment stays) until the record drops it.
    const v2 = withUpdate(
      { ...v1Bigger, rollout: undefined },
      endpoint("chat", "v2", { resources: { cpu: 4, memory: "2Gi" } }),
      Date.now(),
    );
    const v2Name = workerDeploymentName("chat", "v2", revisionId(v2));
    await k8s.scale(v2, 1);
    expect(api.deploymentNames(NAMESPACE)).toEqual([biggerName, v2Name].sort());
    const drained = { ...v2, rollout: undefined, draining: [{ ...v2.rollout!.from, replicas: 1, since: 0 }] };
    await k8s.scale(drained, 1);
    expect(api.deploymentNames(NAMESPACE)).toEqual([biggerName, v2Name].sort());
    expect(api.deployment(NAMESPACE, biggerName)!.spec.replicas).toBe(1);
    api.setReady(NAMESPACE, v2Name, 1);
    await k8s.scale({ ...drained, draining: undefined }, 1);
    expect(api.deploymentNames(NAMESPACE)).toEqual([v2Name]);
    expect(await k8s.observe("chat")).toEqual({ requested: 1, ready: 1 });

    // Another endpoint's Deployments are never touched.
    await k8s.scale(endpoint("other", "v1"), 1);
    expect(k8s.endpoints().sort()).toEqual(["chat", "other"]);
    // A scaler that restarts learns what exists from the cluster, so the reconciler can remove leftovers.
    const restarted: ReplicaBackend & { endpoints(): string[] } = backend();
    expect(restarted.endpoints()).toEqual([]);
    expect((await (restarted as KubernetesBackend).refresh()).sort()).toEqual(["chat", "other"]);
    await k8s.remove("chat");
    expect(k8s.endpoints()).toEqual(["other"]);
    expect(api.deploymentNames(NAMESPACE)).toEqual([
      workerDeploymentName("other", "v1", revisionId(endpoint("other", "v1"))),
    ]);
    expect(await k8s.observe("chat")).toEqual({ requested: 0, ready: 0 });
    await k8s.remove("chat");
    await k8s.close();
  });

  it("creates a vLLM endpoint's Deployment on the vLLM image (PLATFORM_VLLM_WORKER_IMAGE), as built", async () => {
    const k8s = new KubernetesBackend({
      kubeConfig,
      ...loadSettings({ PLATFORM_WORKER_IMAGE: IMAGE, PLATFORM_VLLM_WORKER_IMAGE: VLLM_IMAGE }).kubernetes,
    });
    const record = vllmEndpoint("chat", "v1", { resources: { gpu: 1, gpu_type: "NVIDIA-L4" } });
    await k8s.scale(record, 1);
    const created = api.requests.find((r) => r.method === "POST")!;
    expect(created.body).toEqual(
      JSON.parse(
        JSON.stringify(
          buildWorkerDeployment(record, 1, {
            ...options,
            namespace: NAMESPACE,
            imageByFramework: { vllm: VLLM_IMAGE },
          }),
        ),
      ),
    );
    expectValidDeployment(created.body);
    const stored = api.deployment(NAMESPACE, workerDeploymentName("chat", "v1", revisionId(record)))!;
    expect(stored.spec.template.spec.containers[0].image).toBe(VLLM_IMAGE);
    expect(stored.spec.template.spec.containers[0].resources.requests["nvidia.com/gpu"]).toBe("1");
    expect(stored.spec.template.spec.nodeSelector).toEqual({ [DEFAULT_GPU_TYPE_LABEL]: "NVIDIA-L4" });
    await k8s.scale(endpoint("cpu", "v1"), 1);
    expect(api.deployment(NAMESPACE, nameOf(endpoint("cpu", "v1")))!.spec.template.spec.containers[0].image).toBe(
      IMAGE,
    );
  });

  it("scaling to zero keeps the Deployment and drops older versions at once", async () => {
    const k8s = backend();
    await k8s.scale(endpoint("chat", "v1"), 1);
    await k8s.scale(endpoint("chat", "v2"), 0);
    expect(api.deploymentNames(NAMESPACE)).toEqual([nameOf(endpoint("chat", "v2"))]);
    expect(await k8s.observe("chat")).toEqual({ requested: 0, ready: 0 });
  });

  it("leaves the replica count to another autoscaler when the Deployment is annotated so", async () => {
    const k8s = backend();
    const name = nameOf(endpoint("chat", "v1"));
    await k8s.scale(endpoint("chat", "v1"), 1);
    const live = api.deployment(NAMESPACE, name)!;
    live.metadata.annotations[ANNOTATIONS.replicas] = EXTERNAL_REPLICAS;
    live.spec.replicas = 7; // what KEDA's HPA set

    api.requests.length = 0;
    await k8s.scale(endpoint("chat", "v1"), 2);
    expect(api.writes()).toEqual([]);

    // A new image (a new release of the scaler) changes the spec, not the revision: replaced in place.
    await backend({ image: "example.com/platform:2" }).scale(endpoint("chat", "v1"), 2);
    expect(api.writes()).toEqual([`PUT /apis/apps/v1/namespaces/${NAMESPACE}/deployments/${name}`]);
    const replaced = api.deployment(NAMESPACE, name)!;
    expect(replaced.spec.replicas).toBe(7);
    expect(replaced.metadata.annotations[ANNOTATIONS.replicas]).toBe(EXTERNAL_REPLICAS);
    expect(replaced.spec.template.spec.containers[0].image).toBe("example.com/platform:2");
  });

  it("surfaces API errors with the status code and the API's message", async () => {
    api.forbiddenNamespaces.add("locked");
    const k8s = backend({ namespace: "locked" });
    const error = await k8s.scale(endpoint("chat", "v1"), 1).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(KubernetesApiError);
    const apiError = error as KubernetesApiError;
    expect(apiError.status).toBe(403);
    expect(apiError.reason).toBe("Forbidden");
    expect(apiError.message).toContain("list deployments in locked failed with 403 Forbidden");
    expect(apiError.message).toContain(
      'cannot list resource "deployments" in API group "apps" in the namespace "locked"',
    );
    await expect(k8s.observe("chat")).rejects.toThrow(/403 Forbidden/);
  });

  it("names the call and the cause when the API server cannot be reached", async () => {
    await api.close();
    const error = (await backend()
      .observe("chat")
      .catch((e: unknown) => e)) as Error;
    expect(error.message).toMatch(
      new RegExp(`^Kubernetes API: list deployments in ${NAMESPACE} failed: .*ECONNREFUSED`),
    );
  });

  it("surfaces a conflicting create as the API's AlreadyExists error", async () => {
    const k8s = backend();
    const record = endpoint("chat", "v1");
    // A Deployment with the same name that this scaler did not create (no platform annotations).
    const foreign = buildWorkerDeployment(record, 1, { ...options });
    delete foreign.metadata!.annotations;
    api.requests.length = 0;
    const server = kubeConfig.getCurrentCluster()!.server;
    const res = await fetch(`${server}/apis/apps/v1/namespaces/${NAMESPACE}/deployments`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(foreign),
    });
    expect(res.status).toBe(201);
    await expect(k8s.scale(record, 1)).rejects.toThrow(/409 AlreadyExists: deployments\.apps ".*" already exists/);
  });

  it("runs workers on the scaler's own image when no image is configured", async () => {
    api.pods.set(`${NAMESPACE}/platform-scaler-abc`, {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "platform-scaler-abc", namespace: NAMESPACE },
      spec: { containers: [{ name: "scaler", image: "example.com/platform@sha256:0123" }] },
    });
    const k8s = new KubernetesBackend({ kubeConfig, podName: "platform-scaler-abc", podNamespace: NAMESPACE });
    await k8s.scale(endpoint("chat", "v1"), 1);
    const stored = api.deployment(NAMESPACE, nameOf(endpoint("chat", "v1")))!;
    expect(stored.spec.template.spec.containers[0].image).toBe("example.com/platform@sha256:0123");

    const orphan = new KubernetesBackend({ kubeConfig });
    await expect(orphan.scale(endpoint("chat", "v1"), 1)).rejects.toThrow(/PLATFORM_WORKER_IMAGE/);
  });

  it("reads its options from the scaler's environment (settings.kubernetes)", () => {
    const kubernetes = (env: NodeJS.ProcessEnv) => loadSettings(env).kubernetes;
    expect(
      kubernetes({
        PLATFORM_WORKER_IMAGE: IMAGE,
        PLATFORM_WORKER_GRACE_SECONDS: "120",
        PLATFORM_GPU_TYPE_LABEL: "x/y",
      }),
    ).toEqual({
      image: IMAGE,
      configMapName: "platform-config",
      secretName: "platform-secrets",
      redisPasswordSecret: { name: "platform-redis", key: "password" },
      gpuTypeLabel: "x/y",
      terminationGracePeriodSeconds: 120,
    });
    expect(
      kubernetes({ PLATFORM_WORKER_IMAGE: IMAGE, PLATFORM_VLLM_WORKER_IMAGE: VLLM_IMAGE }).imageByFramework,
    ).toEqual({ vllm: VLLM_IMAGE });
    expect(kubernetes({ PLATFORM_WORKER_IMAGE: IMAGE }).imageByFramework).toBeUndefined();
    expect(
      kubernetes({ PLATFORM_WORKER_IMAGE: IMAGE, PLATFORM_WORKER_REDIS_SECRET: "" }).redisPasswordSecret,
    ).toBeUndefined();
    expect(kubernetes({ POD_NAME: "scaler-0", POD_NAMESPACE: "ml" })).toMatchObject({
      podName: "scaler-0",
      podNamespace: "ml",
    });
    expect(() => kubernetes({ PLATFORM_WORKER_REDIS_SECRET: "no-key" })).toThrow(/PLATFORM_WORKER_REDIS_SECRET/);
    expect(() => kubernetes({ PLATFORM_WORKER_GRACE_SECONDS: "soon" })).toThrow(/PLATFORM_WORKER_GRACE_SECONDS/);
  });
});
