/** The deployment files as shipped: kustomize overlays against the real Kubernetes schemas, the files beside them, docker-compose.yml and the Dockerfile. */
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { delimiter, join } from "node:path";
import { Deployment } from "kubernetes-models/apps/v1/Deployment";
import { StatefulSet } from "kubernetes-models/apps/v1/StatefulSet";
import { NetworkPolicy } from "kubernetes-models/networking.k8s.io/v1/NetworkPolicy";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1/PodDisruptionBudget";
import { Role } from "kubernetes-models/rbac.authorization.k8s.io/v1/Role";
import { RoleBinding } from "kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { Namespace } from "kubernetes-models/v1/Namespace";
import { Secret } from "kubernetes-models/v1/Secret";
import { Service } from "kubernetes-models/v1/Service";
import { ServiceAccount } from "kubernetes-models/v1/ServiceAccount";
import { describe, expect, it } from "vitest";
import { WORKER_HEALTH_PORT } from "../../src/process/worker-env.ts";
import { buildWorkerDeployment, WORKER_APP_NAME } from "../../scaler/backends/endpoints/kubernetes-manifests.ts";
import { SERVICE_APP_NAME, SERVICE_LABELS } from "../../scaler/backends/services/kubernetes-manifests.ts";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import type { Endpoint } from "../../src/endpoints/record.ts";
import type { Control } from "../../src/redis/connection.ts";
import { registerBatchMetrics } from "../../src/batch/metrics.ts";
import { GatewayMetrics } from "../../src/gateway/metrics.ts";
import { registerScalingMetrics } from "../../src/autoscaling/metrics.ts";
import { WorkerMetrics } from "../../workers/metrics.ts";
import { parse, parseAllDocuments } from "yaml";

type Json = Record<string, any>;

const ROOT = join(import.meta.dirname, "..", "..");
const DNS_1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** The real OpenAPI schema for every kind deploy/ may produce; an unknown kind fails the test. */
const MODELS: Record<string, new (data: any) => { validate(): void }> = {
  "v1/Namespace": Namespace,
  "v1/ConfigMap": ConfigMap,
  "v1/Secret": Secret,
  "v1/Service": Service,
  "v1/ServiceAccount": ServiceAccount,
  "apps/v1/Deployment": Deployment,
  "apps/v1/StatefulSet": StatefulSet,
  "rbac.authorization.k8s.io/v1/Role": Role,
  "rbac.authorization.k8s.io/v1/RoleBinding": RoleBinding,
  "policy/v1/PodDisruptionBudget": PodDisruptionBudget,
  "networking.k8s.io/v1/NetworkPolicy": NetworkPolicy,
};

function findOnPath(name: string): string | undefined {
  const dirs = ["/usr/bin", ...(process.env.PATH ?? "").split(delimiter)];
  return dirs.map((d) => join(d, name)).find((p) => existsSync(p));
}

const kubectl = findOnPath("kubectl");
if (!kubectl)
  console.warn("deploy-manifests: kubectl not found on PATH; skipping the kustomize checks (CI installs it)");

function kustomize(overlay: string): Json[] {
  const out = execFileSync(kubectl!, ["kustomize", join(ROOT, "deploy", "overlays", overlay)], { encoding: "utf8" });
  return parseAllDocuments(out).map((doc) => {
    expect(doc.errors).toEqual([]);
    return doc.toJSON() as Json;
  });
}

function validate(object: Json): void {
  const model = MODELS[`${object.apiVersion}/${object.kind}`];
  expect(model, `no schema registered for ${object.apiVersion} ${object.kind}`).toBeDefined();
  expect(() => new model!(object).validate(), `${object.kind}/${object.metadata?.name}`).not.toThrow();
  expect(object.metadata.name).toMatch(
    object.kind === "Role" || object.kind === "RoleBinding" ? DNS_1123_SUBDOMAIN : DNS_1123_LABEL,
  );
}

function find(objects: Json[], kind: string, name: string): Json | undefined {
  return objects.find((o) => o.kind === kind && o.metadata.name === name);
}

function podSpecs(objects: Json[]): [Json, Json][] {
  return objects.filter((o) => o.kind === "Deployment" || o.kind === "StatefulSet").map((o) => [o, o.spec.template]);
}

/** Checks that hold for every overlay: references resolve, selectors select, nothing runs as root. */
function checkConsistency(objects: Json[], namespace: string): void {
  for (const o of objects) {
    validate(o);
    if (o.kind !== "Namespace") expect(o.metadata.namespace, `${o.kind}/${o.metadata.name}`).toBe(namespace);
  }
  expect(find(objects, "Namespace", namespace)).toBeDefined();
  for (const [workload, template] of podSpecs(objects)) {
    const selector: Record<string, string> = workload.spec.selector.matchLabels;
    for (const [k, v] of Object.entries(selector)) expect(template.metadata.labels[k]).toBe(v);
    expect(template.spec.securityContext.runAsNonRoot).toBe(true);
    for (const container of template.spec.containers) {
      expect(container.securityContext.allowPrivilegeEscalation).toBe(false);
      for (const source of container.envFrom ?? []) {
        if (source.configMapRef) expect(find(objects, "ConfigMap", source.configMapRef.name)).toBeDefined();
        if (source.secretRef) expect(source.secretRef.optional).toBe(true);
      }
    }
  }
  for (const service of objects.filter((o) => o.kind === "Service")) {
    const selected = podSpecs(objects).filter(([, t]) =>
      Object.entries(service.spec.selector as Record<string, string>).every(([k, v]) => t.metadata.labels[k] === v),
    );
    expect(selected.length, `Service ${service.metadata.name} selects no pods`).toBe(1);
  }
}

function checkGatewayAndScaler(objects: Json[], namespace: string): Json {
  const gateway = find(objects, "Deployment", "platform-gateway")!;
  const g = gateway.spec.template.spec.containers[0];
  expect(g.args).toEqual(["gateway", "--port", "8000"]);
  expect(g.readinessProbe.httpGet.path).toBe("/readyz");
  expect(g.livenessProbe.httpGet.path).toBe("/healthz");
  // Metrics on a port of their own (PLATFORM_METRICS_PORT), which the Service does not expose.
  expect(gateway.spec.template.metadata.annotations).toMatchObject({
    "prometheus.io/scrape": "true",
    "prometheus.io/port": "9464",
  });
  expect(g.ports.find((p: Json) => p.name === "metrics")?.containerPort).toBe(9464);
  expect(g.env.find((e: Json) => e.name === "PLATFORM_METRICS_PORT")?.value).toBe("9464");
  const service = find(objects, "Service", "platform-gateway")!;
  expect(service.spec.ports.map((p: Json) => p.port)).toEqual([8000]);
  expect(service.metadata.annotations?.["prometheus.io/port"]).toBeUndefined();

  const scaler = find(objects, "Deployment", "platform-scaler")!;
  expect(scaler.spec.replicas).toBe(1);
  expect(scaler.spec.template.spec.serviceAccountName).toBe("platform-scaler");
  expect(scaler.spec.template.spec.containers[0].args).toEqual(["scaler", "--backend", "kubernetes"]);
  expect(find(objects, "ServiceAccount", "platform-scaler")).toBeDefined();
  expect(find(objects, "Role", "platform-scaler")!.rules).toEqual([
    {
      apiGroups: ["apps"],
      resources: ["deployments", "deployments/scale"],
      verbs: ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    { apiGroups: [""], resources: ["pods"], verbs: ["get", "list", "watch"] },
    // Deployed services (scaler/backends/services/kubernetes.ts): their logs, Services and environments.
    { apiGroups: [""], resources: ["pods/log"], verbs: ["get"] },
    {
      apiGroups: [""],
      resources: ["services", "configmaps", "secrets"],
      verbs: ["get", "list", "create", "update", "delete"],
    },
  ]);
  const binding = find(objects, "RoleBinding", "platform-scaler")!;
  expect(binding.roleRef).toEqual({ apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "platform-scaler" });
  expect(binding.subjects).toEqual([{ kind: "ServiceAccount", name: "platform-scaler", namespace }]);
  expect(objects.some((o) => o.kind === "ClusterRole" || o.kind === "ClusterRoleBinding")).toBe(false);
  return gateway;
}

/** `env` entry `name` of a container, which must come from a Secret by reference. */
function secretRefEnv(container: Json, name: string): Json {
  const entry = (container.env as Json[] | undefined)?.find((e) => e.name === name);
  expect(entry, `${container.name} has no ${name}`).toBeDefined();
  expect(entry!.value, `${container.name}: ${name} must not be inlined`).toBeUndefined();
  return entry!.valueFrom.secretKeyRef;
}

/** No secret is written into the manifests: no Secret objects, no literal password/key env values, no password in a URL. */
function checkNoPlaintextSecrets(objects: Json[]): void {
  expect(objects.filter((o) => o.kind === "Secret")).toEqual([]);
  for (const [, template] of podSpecs(objects)) {
    for (const container of template.spec.containers) {
      for (const e of (container.env as Json[] | undefined) ?? []) {
        if (/PASSWORD|SECRET_ACCESS|_KEY$|TOKEN/.test(e.name))
          expect(e.value, `${container.name} ${e.name}`).toBeUndefined();
      }
      for (const arg of (container.args as string[] | undefined) ?? [])
        expect(arg).not.toMatch(/^[^$].*:\/\/[^/]*:[^/]*@/);
    }
  }
  for (const map of objects.filter((o) => o.kind === "ConfigMap")) {
    for (const value of Object.values(map.data as Record<string, string>))
      expect(value).not.toMatch(/:\/\/[^/]*:[^/@]+@/);
  }
}

describe.skipIf(!kubectl)("deploy/ kustomize overlays", () => {
  it("dev: Redis requires a password from a Secret, every platform pod gets it by reference, and only they may reach Redis", () => {
    const objects = kustomize("dev");
    checkNoPlaintextSecrets(objects);
    const redis = find(objects, "StatefulSet", "platform-redis")!.spec.template;
    const container = redis.spec.containers[0];
    const args: string[] = container.args;
    expect(args[args.indexOf("--requirepass") + 1]).toBe("$(REDIS_PASSWORD)");
    expect(secretRefEnv(container, "REDIS_PASSWORD")).toEqual({ name: "platform-redis", key: "password" });
    // The probes authenticate through REDISCLI_AUTH, not a password on the command line.
    expect(secretRefEnv(container, "REDISCLI_AUTH")).toEqual({ name: "platform-redis", key: "password" });
    for (const name of ["platform-gateway", "platform-scaler", "platform-trainer"]) {
      const c = find(objects, "Deployment", name)!.spec.template.spec.containers[0];
      expect(secretRefEnv(c, "REDIS_PASSWORD")).toMatchObject({ name: "platform-redis", key: "password" });
    }
    const scalerEnv = find(objects, "Deployment", "platform-scaler")!.spec.template.spec.containers[0].env as Json[];
    expect(scalerEnv.find((e) => e.name === "PLATFORM_WORKER_REDIS_SECRET")?.value).toBe("platform-redis/password");
    const gateway = find(objects, "Deployment", "platform-gateway")!.spec.template.spec.containers[0];
    expect(secretRefEnv(gateway, "PLATFORM_BOOTSTRAP_ADMIN_KEY")).toMatchObject({ name: "platform-admin", key: "key" });

    const policy = find(objects, "NetworkPolicy", "platform-redis")!;
    expect(policy).toBeDefined();
    expect(policy.spec.policyTypes).toEqual(["Ingress"]);
    // It selects exactly the Redis pods...
    for (const [k, v] of Object.entries(policy.spec.podSelector.matchLabels as Record<string, string>))
      expect(redis.metadata.labels[k]).toBe(v);
    const selected = podSpecs(objects).filter(([, t]) =>
      Object.entries(policy.spec.podSelector.matchLabels as Record<string, string>).every(
        ([k, v]) => t.metadata.labels[k] === v,
      ),
    );
    expect(selected.map(([w]) => w.metadata.name)).toEqual(["platform-redis"]);
    // ...and admits only the gateway, the scaler and the workers it creates, on the Redis port.
    expect(policy.spec.ingress).toHaveLength(1);
    const [rule] = policy.spec.ingress;
    expect(rule.ports).toEqual([{ protocol: "TCP", port: 6379 }]);
    expect(rule.from).toHaveLength(1);
    expect(rule.from[0].namespaceSelector).toBeUndefined();
    const allowed: string[] = rule.from[0].podSelector.matchExpressions[0].values;
    expect(rule.from[0].podSelector.matchExpressions[0]).toMatchObject({
      key: "app.kubernetes.io/name",
      operator: "In",
    });
    expect([...allowed].sort()).toEqual(["platform-gateway", "platform-scaler", "platform-trainer", WORKER_APP_NAME]);
    // Every platform pod may reach it, the trainers (CPU and, in overlays/gpu, GPU) included.
    for (const overlay of [objects, kustomize("gpu")])
      for (const [workload, template] of podSpecs(overlay))
        if (workload.metadata.name !== "platform-redis")
          expect(allowed, workload.metadata.name).toContain(template.metadata.labels["app.kubernetes.io/name"]);
  });

  it("prod: no plaintext secrets, and no Redis NetworkPolicy left selecting nothing", () => {
    const objects = kustomize("prod");
    checkNoPlaintextSecrets(objects);
    expect(find(objects, "NetworkPolicy", "platform-redis")).toBeUndefined();
  });

  it("dev and prod: service pods admit the gateway alone, and workers, trainers and the scaler admit no service pod", () => {
    const servicePod = { [SERVICE_LABELS.name]: SERVICE_APP_NAME };
    const matches = (selector: Json, labels: Record<string, string>) =>
      Object.entries((selector.matchLabels ?? {}) as Record<string, string>).every(([k, v]) => labels[k] === v) &&
      ((selector.matchExpressions ?? []) as Json[]).every((e) =>
        e.operator === "In" ? e.values.includes(labels[e.key]) : !e.values.includes(labels[e.key]),
      );
    for (const overlay of ["dev", "prod"]) {
      const objects = kustomize(overlay);
      const services = find(objects, "NetworkPolicy", "platform-services")!;
      expect(services, overlay).toBeDefined();
      expect(services.spec.policyTypes).toEqual(["Ingress"]);
      expect(matches(services.spec.podSelector, servicePod)).toBe(true);
      // One rule, from one peer: the gateway's pods, in this namespace; on every port (RPC and metrics).
      expect(services.spec.ingress).toEqual([
        { from: [{ podSelector: { matchLabels: { "app.kubernetes.io/name": "platform-gateway" } } }] },
      ]);
      const gateway = find(objects, "Deployment", "platform-gateway")!.spec.template.metadata.labels;
      expect(matches(services.spec.ingress[0].from[0].podSelector, gateway)).toBe(true);

      const internal = find(objects, "NetworkPolicy", "platform-internal")!;
      expect(internal.spec.policyTypes).toEqual(["Ingress"]);
      const [rule] = internal.spec.ingress;
      expect(internal.spec.ingress).toHaveLength(1);
      expect(rule.from).toHaveLength(1);
      expect(rule.from[0].namespaceSelector).toEqual({});
      // Every worker, trainer and the scaler is selected; a service pod is no peer of theirs, a gateway is.
      for (const [workload, template] of podSpecs(objects))
        if (["platform-scaler", "platform-trainer"].includes(workload.metadata.name))
          expect(matches(internal.spec.podSelector, template.metadata.labels), workload.metadata.name).toBe(true);
      expect(matches(internal.spec.podSelector, { "app.kubernetes.io/name": WORKER_APP_NAME })).toBe(true);
      expect(matches(internal.spec.podSelector, servicePod)).toBe(false);
      expect(matches(rule.from[0].podSelector, servicePod)).toBe(false);
      expect(matches(rule.from[0].podSelector, gateway)).toBe(true);
    }
  });

  it("dev: one gateway, the scaler with least RBAC, and an AOF/noeviction Redis with a small PVC", () => {
    const objects = kustomize("dev");
    checkConsistency(objects, "platform-dev");
    const gateway = checkGatewayAndScaler(objects, "platform-dev");
    expect(gateway.spec.replicas).toBe(1);
    expect(gateway.spec.template.spec.containers[0].image).toBe("platform:dev");

    const redis = find(objects, "StatefulSet", "platform-redis")!;
    const args: string[] = redis.spec.template.spec.containers[0].args;
    expect(args[args.indexOf("--appendonly") + 1]).toBe("yes");
    expect(args[args.indexOf("--maxmemory-policy") + 1]).toBe("noeviction");
    expect(redis.spec.serviceName).toBe("platform-redis");
    expect(redis.spec.volumeClaimTemplates[0].spec.resources.requests.storage).toBe("1Gi");
    expect(find(objects, "Service", "platform-redis")!.spec.clusterIP).toBe("None");
    expect(find(objects, "ConfigMap", "platform-config")!.data).toMatchObject({
      REDIS_URL: "redis://platform-redis:6379",
      PLATFORM_PREFIX: "platform",
      PLATFORM_ARTIFACTS_URL: expect.stringMatching(/^s3:\/\//),
    });
  });

  it("prod: several gateways with a disruption budget, a pinned image, external Redis", () => {
    const objects = kustomize("prod");
    checkConsistency(objects, "platform");
    const gateway = checkGatewayAndScaler(objects, "platform");
    expect(gateway.spec.replicas).toBeGreaterThanOrEqual(2);
    expect(gateway.spec.template.spec.containers[0].image).toMatch(/:\d+\.\d+\.\d+$/);
    expect(find(objects, "PodDisruptionBudget", "platform-gateway")!.spec.minAvailable).toBeLessThan(
      gateway.spec.replicas,
    );
    expect(objects.some((o) => o.kind === "StatefulSet")).toBe(false);
    expect(find(objects, "Service", "platform-redis")).toBeUndefined();
    expect(find(objects, "ConfigMap", "platform-config")!.data.REDIS_URL).not.toContain("platform-redis");
  });
});

/**
 * A trainer Deployment: `platform trainer` (GPU: `--gpu`) in the trainer image, the platform's
 * configuration and secrets like the other roles, Redis's password by reference, writable /data.
 */
function checkTrainer(objects: Json[], name: string, image: RegExp, gpu: boolean): Json {
  const trainer = find(objects, "Deployment", name)!;
  expect(trainer, name).toBeDefined();
  const pod = trainer.spec.template.spec;
  const c = pod.containers[0];
  expect(c.image).toMatch(image);
  expect(c.args[0]).toBe("trainer");
  expect(c.args.includes("--gpu")).toBe(gpu);
  expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000 });
  expect(c.envFrom).toEqual([
    { configMapRef: { name: "platform-config" } },
    { secretRef: { name: "platform-secrets", optional: true } },
  ]);
  expect(secretRefEnv(c, "REDIS_PASSWORD")).toMatchObject({ name: "platform-redis", key: "password" });
  expect(c.env.find((e: Json) => e.name === "PLATFORM_DATA_DIR")?.value).toBe("/data");
  expect(c.volumeMounts.find((m: Json) => m.mountPath === "/data")).toBeDefined();
  expect(trainer.spec.template.metadata.labels).toMatchObject({
    "app.kubernetes.io/name": "platform-trainer",
    "app.kubernetes.io/part-of": "platform",
  });
  // A job whose trainer stops goes back to the queue: the old pod must not train beside the new one.
  expect(trainer.spec.strategy.type).toBe("Recreate");
  const limits = c.resources.limits ?? {};
  if (gpu) expect(String(limits["nvidia.com/gpu"])).toBe("1");
  else expect(limits["nvidia.com/gpu"]).toBeUndefined();
  return trainer;
}

describe.skipIf(!kubectl)("deploy/ fine-tuning trainers", () => {
  it("dev and prod run a CPU trainer (`platform trainer`) in the trainer image, and no GPU trainer", () => {
    const dev = kustomize("dev");
    checkTrainer(dev, "platform-trainer", /^platform-trainer:dev$/, false);
    expect(find(dev, "Deployment", "platform-trainer-gpu")).toBeUndefined();
    const prod = kustomize("prod");
    checkTrainer(prod, "platform-trainer", /^ghcr\.io\/example\/platform-trainer:\d+\.\d+\.\d+$/, false);
    // The trainer image, not the gateway's: the gateway's has no Python stack.
    const gateway = find(prod, "Deployment", "platform-gateway")!.spec.template.spec.containers[0].image;
    expect(find(prod, "Deployment", "platform-trainer")!.spec.template.spec.containers[0].image).not.toBe(gateway);
  });

  it("gpu: prod plus a GPU trainer (`--gpu`, one nvidia.com/gpu, the GPU toleration the scaler's GPU workers get)", () => {
    const objects = kustomize("gpu");
    checkConsistency(objects, "platform");
    checkNoPlaintextSecrets(objects);
    checkGatewayAndScaler(objects, "platform");
    const cpu = checkTrainer(objects, "platform-trainer", /^ghcr\.io\/example\/platform-trainer:\d+\.\d+\.\d+$/, false);
    const gpu = checkTrainer(
      objects,
      "platform-trainer-gpu",
      /^ghcr\.io\/example\/platform-trainer:\d+\.\d+\.\d+$/,
      true,
    );
    // One image for both trainers.
    expect(gpu.spec.template.spec.containers[0].image).toBe(cpu.spec.template.spec.containers[0].image);
    // Two Deployments, selectors that never select each other's pods.
    const selects = (d: Json, t: Json) =>
      Object.entries(d.spec.selector.matchLabels as Record<string, string>).every(
        ([k, v]) => t.spec.template.metadata.labels[k] === v,
      );
    expect(selects(cpu, gpu)).toBe(false);
    expect(selects(gpu, cpu)).toBe(false);
    const worker = buildWorkerDeployment(
      { ...sampleEndpoint(), config: DeploymentConfig.parse({ model: { name: "stories" }, resources: { gpu: 1 } }) },
      1,
      { namespace: "ns", image: "x" },
    ).spec!.template.spec!;
    expect(worker.tolerations).toBeDefined();
    expect(gpu.spec.template.spec.tolerations).toEqual(worker.tolerations);
    expect(cpu.spec.template.spec.tolerations).toBeUndefined();
  });
});

describe("deploy/ files outside kustomize", () => {
  it("the Secret example is valid and holds only placeholders", () => {
    const secret = parse(readFileSync(join(ROOT, "deploy/base/secret.example.yaml"), "utf8")) as Json;
    validate(secret);
    for (const value of Object.values(secret.stringData as Record<string, string>)) expect(value).toMatch(/EXAMPLE/);
    const base = parse(readFileSync(join(ROOT, "deploy/base/kustomization.yaml"), "utf8")) as Json;
    expect(base.resources).not.toContain("secret.example.yaml");
  });

  it("the KEDA ScaledObjects target a worker Deployment with triggers KEDA knows", () => {
    for (const file of ["scaledobject.yaml", "scaledobject-prometheus.yaml"]) {
      const object = parse(readFileSync(join(ROOT, "deploy/keda", file), "utf8")) as Json;
      expect(object.apiVersion).toBe("keda.sh/v1alpha1");
      expect(object.kind).toBe("ScaledObject");
      expect(object.spec.scaleTargetRef).toMatchObject({ apiVersion: "apps/v1", kind: "Deployment" });
      expect(object.spec.scaleTargetRef.name).toMatch(/^platform-worker-/);
      expect(object.spec.minReplicaCount).toBeLessThanOrEqual(object.spec.maxReplicaCount);
      for (const trigger of object.spec.triggers) {
        expect(["redis", "prometheus"]).toContain(trigger.type);
        // KEDA reads every metadata value as a string.
        for (const value of Object.values(trigger.metadata)) expect(typeof value).toBe("string");
        if (trigger.type === "redis")
          expect(trigger.metadata.listName).toMatch(/^platform:\{[^:]+@[^:]+\}:(wait|active)$/);
        if (trigger.type === "prometheus") expect(trigger.metadata.query).toContain("vllm:num_requests_waiting");
      }
    }
  });

  it("the Prometheus config scrapes the gateway's and the workers' /metrics and loads the alerts", () => {
    const config = parse(readFileSync(join(ROOT, "deploy/prometheus/prometheus.yml"), "utf8")) as Json;
    const jobs = config.scrape_configs as Json[];
    const gateway = jobs.find((j) => j.job_name === "platform-gateway")!;
    expect(gateway.metrics_path).toBe("/metrics");
    expect(gateway.kubernetes_sd_configs[0].role).toBe("pod");
    expect(gateway.relabel_configs.some((r: Json) => r.action === "keep" && r.regex === "platform-gateway")).toBe(true);
    // The gateway's metrics port, by its name in deploy/base/gateway.yaml.
    expect(
      gateway.relabel_configs.some(
        (r: Json) => r.action === "keep" && r.source_labels[0] === "__meta_kubernetes_pod_container_port_name",
      ) && gateway.relabel_configs.some((r: Json) => r.regex === "metrics"),
    ).toBe(true);
    // Workers: the scaler's pods, on the port it names "health" (its probes and /metrics).
    const workers = jobs.find((j) => j.job_name === "platform-workers")!;
    expect(workers.metrics_path).toBe("/metrics");
    expect(workers.relabel_configs.some((r: Json) => r.action === "keep" && r.regex === WORKER_APP_NAME)).toBe(true);
    const port = buildWorkerDeployment(sampleEndpoint(), 1, { image: "platform:test", namespace: "platform" }).spec!
      .template.spec!.containers[0]!.ports![0]!;
    expect(workers.relabel_configs.some((r: Json) => r.action === "keep" && r.regex === port.name)).toBe(true);
    expect(port.containerPort).toBe(WORKER_HEALTH_PORT);
    expect(jobs.find((j) => j.job_name === "platform-compose")!.static_configs[0].targets).toEqual(["platform:9464"]);
    expect(config.rule_files).toEqual(["alerts.yml"]);
  });

  it("the PodMonitors select the same pods and ports as the scrape config", () => {
    const monitors = parseAllDocuments(readFileSync(join(ROOT, "deploy/prometheus/podmonitors.yaml"), "utf8")).map(
      (d) => d.toJSON() as Json,
    );
    const gateway = parseAllDocuments(readFileSync(join(ROOT, "deploy/base/gateway.yaml"), "utf8"))
      .map((d) => d.toJSON() as Json)
      .find((o) => o.kind === "Deployment")!;
    const gatewayPort = gateway.spec.template.spec.containers[0].ports.find((p: Json) => p.containerPort === 9464).name;
    expect(
      monitors.map((m) => [
        m.kind,
        m.spec.selector.matchLabels["app.kubernetes.io/name"],
        m.spec.podMetricsEndpoints[0].port,
      ]),
    ).toEqual([
      ["PodMonitor", "platform-gateway", gatewayPort],
      ["PodMonitor", WORKER_APP_NAME, "health"],
    ]);
  });

  it("the alerting rules: one set of groups in the plain file and the PrometheusRule, accepted by promtool", () => {
    const plain = parse(readFileSync(join(ROOT, "deploy/prometheus/alerts.yml"), "utf8")) as Json;
    const rule = parse(readFileSync(join(ROOT, "deploy/prometheus/prometheusrule.yaml"), "utf8")) as Json;
    expect(rule).toMatchObject({ apiVersion: "monitoring.coreos.com/v1", kind: "PrometheusRule" });
    expect(rule.metadata.name).toMatch(DNS_1123_SUBDOMAIN);
    expect(rule.spec.groups).toEqual(plain.groups);
    const alerts = (plain.groups as Json[]).flatMap((g) => g.rules as Json[]).map((r) => r.alert);
    expect(alerts).toEqual([
      "PlatformEndpointHighErrorRate",
      "PlatformEndpointHighLatencyP99",
      "PlatformEndpointSlowFirstToken",
      "PlatformEndpointUnavailable",
      "PlatformServiceHighErrorRate",
      "PlatformServiceHighLatencyP99",
      "PlatformServiceReplicasBelowDesired",
      "PlatformServiceUnavailable",
    ]);
    // The services' rules read the series docs/services.md names, per organization and service.
    const services = (plain.groups as Json[]).find((g) => g.name === "platform-services")!.rules as Json[];
    for (const r of services) expect(r.expr, r.alert).toMatch(/by \((le, )?org, service\)/);
    expect(services.map((r) => r.expr as string).join("\n")).toMatch(
      /platform_rpc_requests_total[\s\S]*platform_rpc_request_duration_seconds_bucket[\s\S]*platform_service_replicas\{state="ready"\}[\s\S]*platform_service_replicas_desired/,
    );
    const promtool = findOnPath("promtool");
    if (!promtool) {
      console.warn(
        "deploy-manifests: promtool not found on PATH; skipping `promtool check rules` (CI installs Debian's prometheus package)",
      );
      return;
    }
    const out = execFileSync(promtool, ["check", "rules", join(ROOT, "deploy/prometheus/alerts.yml")], {
      encoding: "utf8",
    });
    expect(out).toMatch(/SUCCESS: 8 rules found/);
    // The rules' unit tests (synthetic series, simulated time): each services alert fires for
    // the service it is about, after its `for:`, and not for the healthy ones beside it.
    const tested = execFileSync(promtool, ["test", "rules", "alerts.test.yml"], {
      cwd: join(ROOT, "deploy/prometheus"),
      encoding: "utf8",
    });
    expect(tested).toMatch(/SUCCESS/);
  });

  it("the Grafana dashboard queries the documented metric names by model_name and version", async () => {
    const dashboard = JSON.parse(readFileSync(join(ROOT, "deploy/grafana/platform-dashboard.json"), "utf8")) as Json;
    expect(dashboard.uid).toBe("platform-serving");
    const variables = (dashboard.templating.list as Json[]).map((v) => v.name);
    expect(variables).toEqual(["datasource", "model_name", "version"]);
    const panels = (dashboard.panels as Json[]).filter((p) => p.type !== "row");
    const ids = (dashboard.panels as Json[]).map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    const exprs = panels.flatMap((p) => (p.targets as Json[]).map((t) => t.expr as string));
    for (const metric of [
      "vllm:num_requests_waiting",
      "vllm:num_requests_running",
      "vllm:time_to_first_token_seconds_bucket",
      "vllm:inter_token_latency_seconds_bucket",
      "vllm:e2e_request_latency_seconds_bucket",
      "vllm:request_queue_time_seconds_bucket",
      "vllm:prompt_tokens_total",
      "vllm:generation_tokens_total",
      "vllm:request_success_total",
      "platform_replicas_desired",
      "platform_replicas_ready",
      "platform_rate_limit_rejections_total",
      "platform_requests_total",
      "platform_request_errors_total",
      "platform_scaling_decisions_total",
      "platform_batch_jobs",
      "platform_batch_records",
    ]) {
      expect(
        exprs.some((e) => e.includes(metric)),
        metric,
      ).toBe(true);
    }
    for (const expr of exprs.filter((e) => e.includes("vllm:")))
      expect(expr).toContain('model_name=~"$model_name", version=~"$version"');
    // Every series the dashboard reads is one the gateway or a worker registers (not collected: no Redis here).
    const metrics = new GatewayMetrics(async () => []);
    const unused = {} as Control;
    registerScalingMetrics(metrics.registry, unused, async () => []);
    registerBatchMetrics(metrics.registry, unused);
    const worker = new WorkerMetrics(sampleEndpoint(), "r1", () => ({ running: 0, waiting: 0 }));
    const registered = [...metrics.registry.getMetricsAsArray(), ...worker.registry.getMetricsAsArray()].map(
      (m) => (m as unknown as { name: string }).name,
    );
    const used = new Set(exprs.flatMap((e) => e.match(/\b(vllm:[a-z0-9_]+|platform_[a-z0-9_]+)/g) ?? []));
    for (const series of used) {
      const metric = series.replace(/_bucket$/, "");
      expect(registered.includes(metric), `${metric} is not registered in src/telemetry/`).toBe(true);
    }
    for (const panel of panels) {
      expect(panel.gridPos.x + panel.gridPos.w).toBeLessThanOrEqual(24);
      for (const target of panel.targets as Json[])
        expect(`${target.expr}`.split("(").length).toBe(`${target.expr}`.split(")").length);
    }
  });
});

/** An endpoint record as the scaler would deploy it. */
function sampleEndpoint(): Endpoint {
  return {
    name: "stories",
    config: DeploymentConfig.parse({ model: { name: "stories" } }),
    version: "v1",
    framework: "llamacpp",
    desired_replicas: 1,
    created: 0,
    updated: 0,
  };
}

/** A compose `environment:` in either form (map or `KEY=value` list) as a map. */
function environmentOf(service: Json): Record<string, string> {
  const env = service.environment ?? {};
  if (!Array.isArray(env)) return Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v)]));
  return Object.fromEntries((env as string[]).map((line) => [line.split("=")[0]!, line.slice(line.indexOf("=") + 1)]));
}

/** The Dockerfile's instructions (continuations joined, comments dropped), grouped by stage. */
function dockerStages(text: string): { instruction: string; args: string }[][] {
  const stages: { instruction: string; args: string }[][] = [];
  for (const line of text.replace(/\\\n/g, " ").split("\n")) {
    const m = /^\s*([A-Za-z]+)\s+(.*)$/.exec(line);
    if (!m || line.trimStart().startsWith("#")) continue;
    const instruction = m[1]!.toUpperCase();
    if (instruction === "FROM") stages.push([]);
    stages.at(-1)?.push({ instruction, args: m[2]!.trim() });
  }
  return stages;
}

describe("docker-compose.yml and the Dockerfile", () => {
  const composeText = readFileSync(join(ROOT, "docker-compose.yml"), "utf8");
  const compose = parse(composeText) as Json;

  it("compose: Redis needs the password from REDIS_PASSWORD and keeps its data (AOF, noeviction)", () => {
    const redis = compose.services.redis as Json;
    const command = ([] as string[]).concat(redis.command).join(" ");
    // `$$` is compose's escape for `$`: the container's shell expands it, so the value is not in the command compose stores.
    expect(command).toMatch(/--requirepass "?\$\$REDIS_PASSWORD"?(\s|$)/);
    expect(command).toMatch(/--appendonly yes(\s|$)/);
    expect(command).toMatch(/--maxmemory-policy noeviction(\s|$)/);
    expect(Object.keys(environmentOf(redis))).toContain("REDIS_PASSWORD");
  });

  it("compose: the two secrets are required (${VAR:?message}) with no default, and no secret-looking literal ships", () => {
    const platform = compose.services.platform as Json;
    for (const [service, variable] of [
      ["redis", "REDIS_PASSWORD"],
      ["platform", "REDIS_PASSWORD"],
      ["platform", "PLATFORM_BOOTSTRAP_ADMIN_KEY"],
    ] as const) {
      const value = environmentOf(compose.services[service])[variable];
      expect(value, `${service}.${variable}`).toMatch(new RegExp(`^\\$\\{${variable}:\\?[^}]*\\S[^}]*\\}$`));
    }
    // Nowhere in the file does either get a default (`:-`, `-`) or a literal value.
    for (const variable of ["REDIS_PASSWORD", "PLATFORM_BOOTSTRAP_ADMIN_KEY"]) {
      for (const use of composeText.matchAll(new RegExp(`\\$\\{${variable}([^}]*)\\}`, "g")))
        expect(use[1], use[0]).toMatch(/^:\?/);
    }
    expect(environmentOf(platform).REDIS_URL).not.toMatch(/:[^/@]+@/);
    expect(composeText).not.toMatch(/[0-9a-f]{32,}/i);
    expect(composeText).not.toMatch(/sk-plat-/);
  });

  it("compose: the platform keeps its state on a named volume at /data, the CLI's config included", () => {
    const platform = compose.services.platform as Json;
    const mounts = (platform.volumes as (string | Json)[]).map((v) =>
      typeof v === "string"
        ? { source: v.split(":")[0]!, target: v.split(":")[1]! }
        : { source: v.source as string, target: v.target as string },
    );
    const data = mounts.find((m) => m.target === "/data");
    expect(data, "a volume mounted at /data").toBeDefined();
    // A named volume, declared at the top level: not a host path, not anonymous.
    expect(data!.source).toMatch(/^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/);
    expect(Object.keys(compose.volumes ?? {})).toContain(data!.source);
    expect(environmentOf(platform).PLATFORM_CONFIG_DIR).toMatch(/^\/data\/./);
  });

  it('Dockerfile: the final stage runs as a non-root user, through an absolute ENTRYPOINT, with CMD ["gateway"]', () => {
    const stages = dockerStages(readFileSync(join(ROOT, "Dockerfile"), "utf8"));
    expect(stages.length).toBeGreaterThan(0);
    const final = stages.at(-1)!;
    const last = (instruction: string) => final.filter((i) => i.instruction === instruction).at(-1)?.args;
    const user = last("USER");
    expect(user, "the final stage sets USER").toBeDefined();
    const [name, group] = user!.split(":");
    expect(name).not.toMatch(/^(root|0)$/);
    if (group !== undefined) expect(group).not.toMatch(/^(root|0)$/);
    // Exec form (JSON), so signals reach node and no shell is involved.
    const entrypoint = JSON.parse(last("ENTRYPOINT") ?? "null") as string[] | null;
    expect(Array.isArray(entrypoint)).toBe(true);
    expect(entrypoint!.at(-1)).toMatch(/^\/\S+\/platform\.js$/);
    expect(JSON.parse(last("CMD") ?? "null")).toEqual(["gateway"]);
  });
});

/** The ARG defaults declared before a Dockerfile's first FROM: the only ones a FROM line may use. */
function dockerGlobalArgs(text: string): Record<string, string> {
  const args: Record<string, string> = {};
  for (const line of text.replace(/\\\n/g, " ").split("\n")) {
    if (/^\s*FROM\s/i.test(line)) break;
    const m = /^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)=(\S+)\s*$/i.exec(line);
    if (m) args[m[1]!] = m[2]!;
  }
  return args;
}

describe("deploy/trainer.Dockerfile", () => {
  const text = readFileSync(join(ROOT, "deploy", "trainer.Dockerfile"), "utf8");
  const stages = dockerStages(text);
  const globals = dockerGlobalArgs(text);
  const final = stages.at(-1)!;
  const all = (instruction: string) => final.filter((i) => i.instruction === instruction).map((i) => i.args);
  const last = (instruction: string) => all(instruction).at(-1);
  const rootFinal = dockerStages(readFileSync(join(ROOT, "Dockerfile"), "utf8")).at(-1)!;
  const readme = readFileSync(join(ROOT, "deploy", "README.md"), "utf8");

  it("is the vLLM worker image (the platform, Node, CUDA torch, transformers) plus a pinned peft, checked at build time", () => {
    expect(stages).toHaveLength(1);
    expect(final[0]!.args).toBe("${VLLM_WORKER_IMAGE}");
    expect(globals.VLLM_WORKER_IMAGE).toBeDefined();
    const peft = final.find((i) => i.instruction === "ARG" && i.args.startsWith("PEFT_VERSION="))?.args.split("=")[1];
    expect(peft).toMatch(/^\d+\.\d+\.\d+$/);
    expect(all("RUN").some((args) => args.includes('"peft==${PEFT_VERSION}"'))).toBe(true);
    const check = all("RUN").find((args) => args.includes("import torch, transformers, peft, safetensors"));
    expect(check, "the build imports the Python stack").toBeDefined();
    expect(check).toContain("node /app/bin/platform.js trainer --help");
    expect(all("ENV").join(" ")).toMatch(/PLATFORM_TRAINER_PYTHON=python3/);
  });

  it("runs `platform trainer` as the non-root user, through the platform's ENTRYPOINT", () => {
    expect(last("USER")).toBe("1000:1000");
    expect(final.findIndex((i) => i.instruction === "USER" && i.args === "1000:1000")).toBeGreaterThan(
      final.findIndex((i) => i.instruction === "RUN" && i.args.includes("peft==")),
    );
    expect(JSON.parse(last("ENTRYPOINT")!)).toEqual(
      JSON.parse(rootFinal.filter((i) => i.instruction === "ENTRYPOINT").at(-1)!.args),
    );
    expect(JSON.parse(last("CMD")!)).toEqual(["trainer"]);
  });

  it("deploy/README.md says how to build it, from the platform and vLLM worker images", () => {
    expect(readme).toContain("docker build -f deploy/trainer.Dockerfile --build-arg VLLM_WORKER_IMAGE=");
    expect(readme).toContain("platform trainer --gpu");
  });
});

describe("deploy/vllm-worker.Dockerfile", () => {
  const text = readFileSync(join(ROOT, "deploy", "vllm-worker.Dockerfile"), "utf8");
  const stages = dockerStages(text);
  const globals = dockerGlobalArgs(text);
  const expand = (value: string) =>
    value.replace(
      /\$\{(\w+)\}|\$(\w+)/g,
      (_, a: string | undefined, b: string | undefined) => globals[(a ?? b)!] ?? "",
    );
  /** A stage's base image (ARGs expanded) and its `AS` name. */
  const from = (stage: { instruction: string; args: string }[]) => {
    const [image, as, name] = stage[0]!.args.split(/\s+/);
    return { image: expand(image!), name: as?.toUpperCase() === "AS" ? name : undefined };
  };
  const final = stages.at(-1)!;
  const all = (instruction: string) => final.filter((i) => i.instruction === instruction).map((i) => i.args);
  const last = (instruction: string) => all(instruction).at(-1);
  const rootFinal = dockerStages(readFileSync(join(ROOT, "Dockerfile"), "utf8")).at(-1)!;
  const rootLast = (instruction: string) => rootFinal.filter((i) => i.instruction === instruction).at(-1)?.args;
  const env = Object.fromEntries(
    all("ENV").flatMap((args) => [...args.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=(\S+)/g)].map((m) => [m[1]!, m[2]!])),
  );

  it("is vLLM's official OpenAI-server image at a pinned release", () => {
    const base = from(final).image;
    expect(base).toMatch(/^vllm\/vllm-openai:v\d+\.\d+\.\d+(\.post\d+)?$/);
    // The docs name the release the image is built on.
    expect(
      readFileSync(join(ROOT, "deploy", "README.md"), "utf8").includes(base),
      `deploy/README.md names ${base}`,
    ).toBe(true);
  });

  it("adds the platform image's code, production node_modules and Node 24, not a second build of them", () => {
    const platform = stages.find((s) => from(s).name === "platform");
    expect(platform, 'a stage named "platform"').toBeDefined();
    expect(platform!.length, "the platform stage only names the image").toBe(1);
    expect(platform![0]!.args).toMatch(/^\$\{PLATFORM_IMAGE\}\s/);
    expect(globals.PLATFORM_IMAGE).toBeDefined();
    expect(all("COPY")).toEqual(
      expect.arrayContaining(["--from=platform /usr/local/bin/node /usr/local/bin/node", "--from=platform /app /app"]),
    );
    // Nothing from the build context and no npm: everything comes from the root Dockerfile's image.
    expect(all("COPY").every((args) => args.startsWith("--from=platform "))).toBe(true);
    expect(all("RUN").some((args) => /\bnpm\b/.test(args))).toBe(false);
    // ...whose final stage is the official Node 24 image with the platform under /app.
    expect(rootFinal[0]!.args).toMatch(/^node:24[-.\w]*$/);
    expect(rootFinal.filter((i) => i.instruction === "WORKDIR").map((i) => i.args)).toContain("/app");
    // The build fails, not the first replica, when Node cannot run on vLLM's base.
    expect(all("RUN").some((args) => args.includes("node /app/bin/platform.js worker --help"))).toBe(true);
  });

  it("runs `platform worker` through the platform's own ENTRYPOINT, so the scaler's worker args fit either image", () => {
    expect(JSON.parse(last("ENTRYPOINT")!)).toEqual(JSON.parse(rootLast("ENTRYPOINT")!));
    expect(JSON.parse(last("ENTRYPOINT")!)).toEqual(["node", "/app/bin/platform.js"]);
    expect(JSON.parse(last("CMD")!)).toEqual(["worker"]);
    const container = buildWorkerDeployment({ ...sampleEndpoint(), framework: "vllm" }, 1, {
      namespace: "ns",
      image: "x",
    }).spec!.template.spec!.containers[0]!;
    expect(container.command).toBeUndefined();
    expect(container.args![0]).toBe(JSON.parse(last("CMD")!)[0]);
    expect(last("EXPOSE")).toBe(String(WORKER_HEALTH_PORT));
  });

  it("points VLLM_BIN at the image's vllm, checked at build time", () => {
    const arg = final.find((i) => i.instruction === "ARG" && i.args.startsWith("VLLM_BIN="))?.args.split("=")[1];
    expect(arg).toMatch(/^\/\S+\/vllm$/);
    expect(env.VLLM_BIN).toBe("${VLLM_BIN}");
    expect(all("RUN").some((args) => args.includes('-x "$VLLM_BIN"'))).toBe(true);
    expect(env.VLLM_NO_USAGE_STATS).toBe("1");
  });

  it("runs as the non-root user the worker pods run as, with a writable HOME for vLLM's caches", () => {
    const pod = buildWorkerDeployment({ ...sampleEndpoint(), framework: "vllm" }, 1, { namespace: "ns", image: "x" })
      .spec!.template.spec!;
    expect(last("USER")).toBe(`${pod.securityContext!.runAsUser}:${pod.securityContext!.runAsGroup}`);
    expect(env.HOME).toMatch(/^\/\S+$/);
    const setup = all("RUN").find((args) => args.includes("useradd"))!;
    expect(setup).toContain(`chown 1000:1000 ${env.HOME}`);
    expect(final.findIndex((i) => i.instruction === "USER")).toBeGreaterThan(final.findIndex((i) => i.args === setup));
  });
});
