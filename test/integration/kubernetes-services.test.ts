/**
 * Services on Kubernetes (scaler/backends/services/kubernetes.ts): the objects it builds against
 * the real Kubernetes schemas, and the backend against the fake API server: what goes over the
 * wire, how a Deployment's status and pods become rollout outcomes and replica records, how
 * pods' logs are forwarded, and remove.
 */
import { KubeConfig } from "@kubernetes/client-node";
import { Deployment } from "kubernetes-models/apps/v1/Deployment";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { Secret } from "kubernetes-models/v1/Secret";
import { Service } from "kubernetes-models/v1/Service";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  buildServiceDeployment,
  buildServiceEnvironment,
  buildServiceService,
  PYTHON_METRICS_PORT,
  pullSecretName,
  releaseToRun,
  revisionObjectName,
  SERVICE_LABELS,
  serviceObjectName,
} from "../../scaler/backends/services/kubernetes-manifests.ts";
import { maskSecrets, podReplica, podTrouble, rolloutOutcome } from "../../scaler/backends/services/kubernetes-pods.ts";
import { parseLogLines, timestampKey } from "../../scaler/backends/services/kubernetes-pod-logs.ts";
import { KubernetesServiceBackend } from "../../scaler/backends/services/kubernetes.ts";
import type { EnvironmentParts, ServiceReports } from "../../scaler/backends/services/backend.ts";
import { operatorServes } from "../../src/registry-credentials/resolve.ts";
import { type Release, ServiceRecord, type ServiceReplica } from "../../src/services/record.ts";
import { FakeKubernetesApi, kubeletTimestamp } from "../helpers/fake-kubernetes-api.ts";

type Json = Record<string, any>;

const NAMESPACE = "platform";
const DNS_1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const DIGEST_A = `sha256:${"a".repeat(64)}`;
const DIGEST_B = `sha256:${"b".repeat(64)}`;
const REPO = "registry.example.com/acme/items";

const release = (tag: string, digest: string, revision: string): Release => ({ tag, digest, revision, protos: [] });

function record(
  overrides: Partial<ServiceRecord> = {},
  rollout: Partial<ServiceRecord["rollout"]> = {},
): ServiceRecord {
  return ServiceRecord.parse({
    org: "acme",
    name: "items",
    repo_type: "js",
    image_repository: REPO,
    port: 8080,
    replicas: 2,
    rpc_services: ["acme.items.v1.ItemService"],
    owner: { id: "k1", name: "alice" },
    created: 1,
    updated: 1,
    current: null,
    previous: null,
    rollout: {
      id: 1,
      release: release("1.0.0", DIGEST_A, "r1"),
      from_tag: null,
      cause: "deploy",
      phase: "progressing",
      started: 1,
      deadline_ms: 120_000,
      by: { id: "k1", name: "alice" },
      ...rollout,
    },
    ...overrides,
  });
}

const OPTIONS = { namespace: NAMESPACE };

/** Schema validation against the real Kubernetes OpenAPI, plus the name rules the schema leaves out. */
function expectValid(object: unknown, model: new (data: any) => { validate(): void }, nameRule = DNS_1123_LABEL) {
  const plain = JSON.parse(JSON.stringify(object));
  expect(() => new model(plain).validate()).not.toThrow();
  expect(plain.metadata.name).toMatch(nameRule);
  expect(plain.metadata.name.length).toBeLessThanOrEqual(63);
}

describe("service manifests", () => {
  it("a js service: a Deployment pinned by digest, rolling without losing capacity, probed over HTTP, non-root", () => {
    const service = record();
    const d = buildServiceDeployment(service, service.rollout.release, OPTIONS);
    expectValid(d, Deployment);
    const name = serviceObjectName("acme", "items");
    expect(d.metadata!.name).toBe(name);
    expect(d.metadata!.labels).toEqual({
      "app.kubernetes.io/name": "platform-service",
      "app.kubernetes.io/managed-by": "platform-scaler",
      "platform/org": "acme",
      "platform/service": "items",
      "platform/revision": "r1",
    });
    expect(d.metadata!.annotations).toMatchObject({
      "platform/tag": "1.0.0",
      "platform/digest": DIGEST_A,
      "platform/rollout": "1",
    });
    const spec = d.spec!;
    expect(spec.replicas).toBe(2);
    expect(spec.strategy).toEqual({ type: "RollingUpdate", rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } });
    expect(spec.progressDeadlineSeconds).toBe(120);
    // The selector leaves the revision out: both revisions' pods belong to the Deployment while it rolls.
    expect(spec.selector.matchLabels).not.toHaveProperty(SERVICE_LABELS.revision);
    for (const [k, v] of Object.entries(spec.selector.matchLabels!)) expect(spec.template.metadata!.labels![k]).toBe(v);
    const pod = spec.template.spec!;
    expect(pod.automountServiceAccountToken).toBe(false);
    expect(pod.enableServiceLinks).toBe(false);
    expect(pod.securityContext).toEqual({ runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } });
    const c = pod.containers[0]!;
    expect(c.image).toBe(`${REPO}@${DIGEST_A}`);
    // A node's cached image never runs without this pod's own pull being allowed.
    expect(c.imagePullPolicy).toBe("Always");
    expect(c.ports).toEqual([{ name: "rpc", containerPort: 8080, protocol: "TCP" }]);
    expect(c.env).toEqual([
      { name: "PORT", value: "8080" },
      { name: "HOST", value: "0.0.0.0" },
    ]);
    const envName = revisionObjectName("acme", "items", "r1");
    expect(c.envFrom).toEqual([{ configMapRef: { name: envName } }, { secretRef: { name: envName } }]);
    expect(c.readinessProbe!.httpGet).toEqual({ path: "/readyz", port: 8080 });
    expect(c.livenessProbe!.httpGet).toEqual({ path: "/healthz", port: 8080 });
    // The startup probe covers the rollout's deadline, so liveness never kills a slow start.
    expect(c.startupProbe!.periodSeconds! * c.startupProbe!.failureThreshold!).toBeGreaterThanOrEqual(120);
    expect(c.resources).toEqual({ requests: { cpu: "100m", memory: "128Mi" }, limits: { memory: "512Mi" } });
    expect(c.securityContext).toEqual({
      allowPrivilegeEscalation: false,
      capabilities: { drop: ["ALL"] },
      readOnlyRootFilesystem: false,
    });
    expect(spec.template.metadata!.annotations).toMatchObject({ "prometheus.io/port": "8080" });
    expect(spec.template.metadata!.annotations).not.toHaveProperty("platform/rollout");
  });

  it("a python service: gRPC probes, the metrics port, h2c on its Service", () => {
    const service = record({ repo_type: "python", port: 50051 });
    const c = buildServiceDeployment(service, service.rollout.release, OPTIONS).spec!.template.spec!.containers[0]!;
    expect(c.readinessProbe!.grpc).toEqual({ port: 50051 });
    expect(c.livenessProbe!.grpc).toEqual({ port: 50051 });
    expect(c.readinessProbe!.httpGet).toBeUndefined();
    expect(c.env).toContainEqual({ name: "METRICS_PORT", value: String(PYTHON_METRICS_PORT) });
    expect(c.ports).toContainEqual({ name: "metrics", containerPort: PYTHON_METRICS_PORT, protocol: "TCP" });
    const svc = buildServiceService(service, OPTIONS);
    expectValid(svc, Service, DNS_1035_LABEL);
    expect(svc.spec).toMatchObject({
      type: "ClusterIP",
      ports: [{ name: "rpc", port: 50051, targetPort: "rpc", appProtocol: "kubernetes.io/h2c" }],
    });
    expect(buildServiceService(record(), OPTIONS).spec!.ports![0]!.appProtocol).toBe("http");
  });

  it("the revision's environment: an immutable ConfigMap of variables and Secret of secrets", () => {
    const { configMap, secret } = buildServiceEnvironment(
      record(),
      "r1",
      { env: { LOG_LEVEL: "debug", A: "1" }, secrets: { DATABASE_URL: "postgres://u:pw@db/x" } },
      OPTIONS,
    );
    expectValid(configMap, ConfigMap, /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/);
    expectValid(secret, Secret, /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/);
    expect(configMap.metadata!.name).toBe(revisionObjectName("acme", "items", "r1"));
    expect(configMap).toMatchObject({ immutable: true, data: { A: "1", LOG_LEVEL: "debug" } });
    expect(JSON.stringify(configMap)).not.toContain("pw@");
    expect(secret).toMatchObject({
      immutable: true,
      type: "Opaque",
      stringData: { DATABASE_URL: "postgres://u:pw@db/x" },
    });
    expect(secret.metadata!.labels![SERVICE_LABELS.revision]).toBe("r1");
  });

  it("names are DNS labels within 63 characters, and distinct where org and name split differently", () => {
    expect(serviceObjectName("a-b", "c")).not.toBe(serviceObjectName("a", "b-c"));
    const long = serviceObjectName("o".repeat(63), `s${"x".repeat(39)}`);
    expect(long.length).toBeLessThanOrEqual(63);
    expect(long).toMatch(DNS_1035_LABEL);
    const service = record({ org: "o".repeat(63), name: `s${"x".repeat(39)}` });
    expectValid(buildServiceDeployment(service, service.rollout.release, OPTIONS), Deployment);
    expectValid(buildServiceService(service, OPTIONS), Service, DNS_1035_LABEL);
  });

  it("runs the rollout's release, or the serving one again after a failed rollout", () => {
    const current = release("1.0.0", DIGEST_A, "r1");
    const next = release("2.0.0", DIGEST_B, "r2");
    expect(releaseToRun(record({ current }, { id: 2, release: next }))).toEqual(next);
    expect(releaseToRun(record({ current }, { id: 2, release: next, phase: "failed" }))).toEqual(current);
    // A first deployment that failed has nothing to go back to.
    expect(releaseToRun(record({}, { phase: "failed" })).revision).toBe("r1");
  });

  it("masks secret values of four bytes or more", () => {
    expect(maskSecrets("connect to postgres://u:hunter2@db failed, id=ab", { A: "hunter2", B: "ab" })).toBe(
      "connect to postgres://u:***@db failed, id=ab",
    );
  });

  it("reads log lines with the kubelet's timestamps in time order, and drops a line cut short", () => {
    expect(timestampKey("2025-01-01T00:00:05.1Z")! > timestampKey("2025-01-01T00:00:05.05Z")!).toBe(true);
    expect(timestampKey("2025-01-01T00:00:05Z")! < timestampKey("2025-01-01T00:00:05.000000001Z")!).toBe(true);
    expect(kubeletTimestamp(Date.parse("2025-01-01T00:00:05.100Z"))).toBe("2025-01-01T00:00:05.1Z");
    expect(
      parseLogLines("2025-01-01T00:00:05.1Z hello world\n2025-01-01T00:00:06Z \n2025-01-01T00:00:07Z cut"),
    ).toEqual([
      { time: "2025-01-01T00:00:05.1Z", key: "2025-01-01T00:00:05.100000000", text: "hello world" },
      { time: "2025-01-01T00:00:06Z", key: "2025-01-01T00:00:06.000000000", text: "" },
    ]);
  });
});

describe("reading the cluster back", () => {
  const service = record();
  const deployed = (status: Json, generation = 1): any => ({
    ...JSON.parse(JSON.stringify(buildServiceDeployment(service, service.rollout.release, OPTIONS))),
    status: { observedGeneration: 1, ...status },
    metadata: {
      ...JSON.parse(JSON.stringify(buildServiceDeployment(service, service.rollout.release, OPTIONS))).metadata,
      generation,
    },
  });
  const ready = { type: "Available", status: "True" };

  it("complete when every replica is updated, ready and available, and no old one is left", () => {
    const all = { replicas: 2, updatedReplicas: 2, readyReplicas: 2, availableReplicas: 2 };
    expect(rolloutOutcome(deployed({ ...all, conditions: [ready] }), service)).toEqual({ phase: "complete" });
    // An old replica still running, or the controller not caught up with the spec: not yet.
    expect(rolloutOutcome(deployed({ ...all, replicas: 3, conditions: [ready] }), service)).toBeUndefined();
    expect(rolloutOutcome(deployed({ ...all, conditions: [ready] }, 2), service)).toBeUndefined();
    // Another rollout's Deployment, or a rollout already decided: nothing to say.
    expect(rolloutOutcome(deployed({ ...all, conditions: [ready] }), record({}, { id: 2 }))).toBeUndefined();
    expect(rolloutOutcome(deployed({ ...all, conditions: [ready] }), record({}, { phase: "failed" }))).toBeUndefined();
  });

  it("failed when the progress deadline passed", () => {
    const outcome = rolloutOutcome(
      deployed({
        conditions: [
          {
            type: "Progressing",
            status: "False",
            reason: "ProgressDeadlineExceeded",
            message: 'ReplicaSet "x" has timed out progressing.',
          },
        ],
      }),
      service,
    );
    expect(outcome).toEqual({
      phase: "failed",
      reason: 'the new replicas of 1.0.0 did not become ready within 120 s (ReplicaSet "x" has timed out progressing.)',
    });
  });

  it("a pod as a replica record: ready, starting, crashed, draining", () => {
    const base = (status: Json, metadata: Json = {}): any => ({
      metadata: {
        name: "p1",
        labels: { [SERVICE_LABELS.revision]: "r1" },
        annotations: { "platform/tag": "1.0.0", "platform/digest": DIGEST_A },
        ...metadata,
      },
      status: { podIP: "10.0.0.7", startTime: "2025-01-01T00:00:00Z", ...status },
    });
    const readyPod = base({
      conditions: [{ type: "Ready", status: "True", lastTransitionTime: "2025-01-01T00:00:03Z" }],
      containerStatuses: [
        {
          name: "service",
          ready: true,
          restartCount: 1,
          state: { running: {} },
          lastState: { terminated: { exitCode: 137, signal: 9, finishedAt: "2025-01-01T00:00:01Z" } },
        },
      ],
    });
    const replica = podReplica(readyPod, service, 5) as ServiceReplica;
    expect(replica).toEqual({
      id: "p1",
      revision: "r1",
      tag: "1.0.0",
      digest: DIGEST_A,
      state: "ready",
      url: "http://10.0.0.7:8080",
      metrics_url: "http://10.0.0.7:8080/metrics",
      started: Date.parse("2025-01-01T00:00:00Z"),
      ready_at: Date.parse("2025-01-01T00:00:03Z"),
      restarts: 1,
      last_exit: { code: 137, signal: "SIGKILL", at: Date.parse("2025-01-01T00:00:01Z") },
      heartbeat: 5,
    });
    expect(
      podReplica(
        base({ containerStatuses: [{ name: "service", ready: false, restartCount: 0, state: { running: {} } }] }),
        service,
        5,
      )!.state,
    ).toBe("starting");
    expect(
      podReplica(
        base({
          containerStatuses: [
            { name: "service", ready: false, restartCount: 3, state: { waiting: { reason: "CrashLoopBackOff" } } },
          ],
        }),
        service,
        5,
      )!.state,
    ).toBe("crashed");
    expect(podReplica(base({}, { deletionTimestamp: "2025-01-01T00:01:00Z" }), service, 5)!.state).toBe("draining");
    // A failed pull is said in the platform's words: nothing the registry sent (through the kubelet) is echoed.
    const pull = (message: string) =>
      podTrouble({
        status: {
          containerStatuses: [
            {
              name: "service",
              ready: false,
              restartCount: 0,
              image: `${REPO}@${DIGEST_A}`,
              imageID: "",
              state: { waiting: { reason: "ErrImagePull", message } },
            },
          ],
        },
      });
    expect(
      pull(
        'failed to resolve reference: unexpected status 401 Unauthorized: {"errors":[{"message":"<the registry\'s words>"}]}',
      ),
    ).toBe(
      `ErrImagePull: pulling ${REPO}@${DIGEST_A} with the kubelet failed: not logged in to registry.example.com; an admin of the organization runs: platform registry credentials set registry.example.com --username <user> --password-stdin`,
    );
    expect(pull("rpc error: <the registry's words>")).toBe(
      `ErrImagePull: pulling ${REPO}@${DIGEST_A} with the kubelet failed: registry.example.com did not serve the image (the kubelet could not copy it)`,
    );
    expect(podReplica(base({ podIP: "fd00::7" }), record({ repo_type: "python", port: 50051 }), 5)).toMatchObject({
      url: "http://[fd00::7]:50051",
      metrics_url: `http://[fd00::7]:${PYTHON_METRICS_PORT}/metrics`,
    });
  });
});

/** A ServiceReports that keeps what it was told. */
class Reports implements ServiceReports {
  replicas = new Map<string, ServiceReplica>();
  gone: string[] = [];
  outcomes: { rolloutId: number; outcome: Json }[] = [];
  lines: { replica: string; tag: string; text: string; at?: number }[] = [];
  environments = new Map<string, EnvironmentParts>();
  async replica(_org: string, _name: string, replica: ServiceReplica) {
    this.replicas.set(replica.id, replica);
  }
  async replicaGone(_org: string, _name: string, id: string) {
    this.replicas.delete(id);
    this.gone.push(id);
  }
  async rolloutFinished(_org: string, _name: string, rolloutId: number, outcome: Json) {
    this.outcomes.push({ rolloutId, outcome });
  }
  async log(_org: string, _name: string, line: { replica: string; tag: string; text: string; at?: number }) {
    this.lines.push(line);
  }
  async environment(org: string, name: string, revision: string) {
    const parts = await this.environmentParts(org, name, revision);
    return { ...parts.env, ...parts.secrets };
  }
  async environmentParts(_org: string, _name: string, revision: string) {
    const parts = this.environments.get(revision);
    if (!parts) throw new Error(`no environment snapshot for ${revision}`);
    return parts;
  }
}

describe("KubernetesServiceBackend against an API server", () => {
  let api: FakeKubernetesApi;
  let kubeConfig: KubeConfig;
  let reports: Reports;

  beforeEach(async () => {
    api = new FakeKubernetesApi();
    const server = await api.start();
    kubeConfig = new KubeConfig();
    kubeConfig.loadFromOptions({
      clusters: [{ name: "fake", server, skipTLSVerify: true }],
      users: [{ name: "scaler", token: "test-token" }],
      contexts: [{ name: "fake", cluster: "fake", user: "scaler", namespace: "ignored" }],
      currentContext: "fake",
    });
    reports = new Reports();
    reports.environments.set("r1", { env: { LOG_LEVEL: "info" }, secrets: { API_TOKEN: "s3cret-token" } });
    reports.environments.set("r2", { env: { LOG_LEVEL: "debug" }, secrets: { API_TOKEN: "s3cret-token-2" } });
  });

  afterEach(async () => {
    await api.close();
  });

  const backend = () =>
    new KubernetesServiceBackend({ namespace: NAMESPACE, configMapName: "c", secretName: "s" }, reports, {
      kubeConfig,
      observeIntervalMs: 0,
      logIntervalMs: 0,
    });
  const NAME = serviceObjectName("acme", "items");
  const ENV_R1 = revisionObjectName("acme", "items", "r1");
  const ENV_R2 = revisionObjectName("acme", "items", "r2");

  /** A pod of the Deployment as the ReplicaSet controller would make it, in the state given. */
  function addPod(name: string, revision: string, tag: string, digest: string, container: Json, ip = "10.0.0.9") {
    const template = api.deployment(NAMESPACE, NAME)!.spec.template;
    api.pods.set(`${NAMESPACE}/${name}`, {
      apiVersion: "v1",
      kind: "Pod",
      metadata: {
        name,
        namespace: NAMESPACE,
        labels: { ...template.metadata.labels, [SERVICE_LABELS.revision]: revision },
        annotations: { ...template.metadata.annotations, "platform/tag": tag, "platform/digest": digest },
      },
      spec: { containers: [{ name: "service", image: `${REPO}@${digest}` }] },
      status: {
        phase: "Running",
        podIP: ip,
        startTime: new Date().toISOString(),
        conditions: [
          { type: "Ready", status: container.ready ? "True" : "False", lastTransitionTime: new Date().toISOString() },
        ],
        containerStatuses: [{ name: "service", restartCount: 0, image: "x", imageID: "x", ...container }],
      },
    });
  }

  it("creates the environment, the Deployment and the Service, then writes nothing while nothing changes", async () => {
    const k8s = backend();
    expect(k8s.namespace).toBe(NAMESPACE);
    const service = record();
    await k8s.apply(service);
    expect(api.writes()).toEqual([
      `POST /api/v1/namespaces/${NAMESPACE}/configmaps`,
      `POST /api/v1/namespaces/${NAMESPACE}/secrets`,
      `POST /apis/apps/v1/namespaces/${NAMESPACE}/deployments`,
      `POST /api/v1/namespaces/${NAMESPACE}/services`,
    ]);
    const posted = (path: string) => api.requests.find((r) => r.method === "POST" && r.path.endsWith(path))!.body;
    // What reached the wire is exactly what the builders made, and valid.
    expect(posted("/deployments")).toEqual(
      JSON.parse(JSON.stringify(buildServiceDeployment(service, service.rollout.release, OPTIONS))),
    );
    expectValid(posted("/deployments"), Deployment);
    expectValid(posted("/services"), Service, DNS_1035_LABEL);
    expect(posted("/configmaps")).toMatchObject({
      metadata: { name: ENV_R1 },
      data: { LOG_LEVEL: "info" },
      immutable: true,
    });
    expect(posted("/secrets")).toMatchObject({ metadata: { name: ENV_R1 }, stringData: { API_TOKEN: "s3cret-token" } });
    expect(JSON.stringify(posted("/configmaps"))).not.toContain("s3cret");
    expect(api.object("secrets", NAMESPACE, ENV_R1)!.data.API_TOKEN).toBe(
      Buffer.from("s3cret-token").toString("base64"),
    );
    expect(api.requests.every((r) => r.authorization === "Bearer test-token")).toBe(true);
    expect(k8s.services()).toEqual(["acme/items"]);

    api.requests.length = 0;
    await k8s.apply(service);
    await k8s.apply(service);
    expect(api.writes()).toEqual([]);
    // Each tick: one listing of Deployments and one of pods, shared by every service; no log read while no container runs.
    expect(api.requests.map((r) => `${r.method} ${r.path}`).sort()).toEqual(
      [
        `GET /apis/apps/v1/namespaces/${NAMESPACE}/deployments`,
        `GET /api/v1/namespaces/${NAMESPACE}/pods`,
        `GET /apis/apps/v1/namespaces/${NAMESPACE}/deployments`,
        `GET /api/v1/namespaces/${NAMESPACE}/pods`,
      ].sort(),
    );
    expect(api.requests[0]!.query.get("labelSelector")).toBe(
      "app.kubernetes.io/name=platform-service,app.kubernetes.io/managed-by=platform-scaler",
    );
  });

  it("reports replicas from pods and completes the rollout once the Deployment has rolled out", async () => {
    const k8s = backend();
    const service = record();
    await k8s.apply(service);
    addPod("p-ready", "r1", "1.0.0", DIGEST_A, { ready: true, state: { running: {} } }, "10.0.0.1");
    addPod(
      "p-start",
      "r1",
      "1.0.0",
      DIGEST_A,
      { ready: false, state: { waiting: { reason: "ContainerCreating" } } },
      "10.0.0.2",
    );
    await k8s.apply(service);
    expect(reports.replicas.get("p-ready")).toMatchObject({
      state: "ready",
      url: "http://10.0.0.1:8080",
      tag: "1.0.0",
      digest: DIGEST_A,
      revision: "r1",
    });
    expect(reports.replicas.get("p-start")).toMatchObject({ state: "starting" });
    expect(reports.outcomes).toEqual([]);

    api.setDeploymentStatus(NAMESPACE, NAME, {
      replicas: 2,
      updatedReplicas: 2,
      readyReplicas: 2,
      availableReplicas: 2,
      conditions: [
        { type: "Available", status: "True", reason: "MinimumReplicasAvailable" },
        { type: "Progressing", status: "True", reason: "NewReplicaSetAvailable" },
      ],
    });
    api.pods.delete(`${NAMESPACE}/p-start`);
    await k8s.apply(service);
    await k8s.apply(service);
    expect(reports.outcomes).toEqual([{ rolloutId: 1, outcome: { phase: "complete" } }]);
    expect(reports.gone).toEqual(["p-start"]);
  });

  it("rolls to a new release in place, fails it at the deadline with the pod's trouble and masked logs, and goes back", async () => {
    const k8s = backend();
    const r1 = release("1.0.0", DIGEST_A, "r1");
    const r2 = release("2.0.0", DIGEST_B, "r2");
    await k8s.apply(record({ current: r1 }, { phase: "complete" }));
    const v1Template = api.deployment(NAMESPACE, NAME)!.spec.template;

    api.requests.length = 0;
    const rolling = record({ current: r1 }, { id: 2, release: r2, from_tag: "1.0.0", cause: "start" });
    await k8s.apply(rolling);
    expect(api.writes()).toEqual([
      `POST /api/v1/namespaces/${NAMESPACE}/configmaps`,
      `POST /api/v1/namespaces/${NAMESPACE}/secrets`,
      `PUT /apis/apps/v1/namespaces/${NAMESPACE}/deployments/${NAME}`,
    ]);
    const replaced = api.deployment(NAMESPACE, NAME)!;
    expect(replaced.metadata.generation).toBe(2);
    expect(replaced.spec.template.spec.containers[0].image).toBe(`${REPO}@${DIGEST_B}`);
    expect(replaced.spec.template.spec.containers[0].envFrom[0].configMapRef.name).toBe(ENV_R2);
    expect(replaced.metadata.annotations["platform/rollout"]).toBe("2");
    // Both revisions' environments exist while the rollout runs: old pods that restart still find theirs.
    expect(api.objectNames("configmaps", NAMESPACE)).toEqual([ENV_R1, ENV_R2].sort());

    // The controller has not seen generation 2 yet: the first rollout's deadline condition is not this one's.
    api.setDeploymentStatus(NAMESPACE, NAME, {
      observedGeneration: 1,
      conditions: [{ type: "Progressing", status: "False", reason: "ProgressDeadlineExceeded" }],
    });
    await k8s.apply(rolling);
    expect(reports.outcomes).toEqual([]);

    addPod("p-old", "r1", "1.0.0", DIGEST_A, { ready: true, state: { running: {} } });
    addPod("p-new", "r2", "2.0.0", DIGEST_B, {
      ready: false,
      restartCount: 4,
      state: { waiting: { reason: "CrashLoopBackOff", message: "back-off 40s restarting failed container" } },
      lastState: { terminated: { exitCode: 1, reason: "Error", finishedAt: new Date().toISOString() } },
    });
    api.log(NAMESPACE, "p-new", "starting items on :8080", { previous: true });
    api.log(NAMESPACE, "p-new", "error: cannot reach the database with token s3cret-token-2", { previous: true });
    api.setDeploymentStatus(NAMESPACE, NAME, {
      observedGeneration: 2,
      conditions: [
        { type: "Available", status: "True" },
        {
          type: "Progressing",
          status: "False",
          reason: "ProgressDeadlineExceeded",
          message: `ReplicaSet "${NAME}-2" has timed out progressing.`,
        },
      ],
    });
    await k8s.apply(rolling);
    await k8s.apply(rolling);
    expect(reports.outcomes).toHaveLength(1);
    const { rolloutId, outcome } = reports.outcomes[0]!;
    expect(rolloutId).toBe(2);
    expect(outcome.phase).toBe("failed");
    expect(outcome.reason).toContain("did not become ready within 120 s");
    expect(outcome.reason).toContain(
      "pod p-new: CrashLoopBackOff: back-off 40s restarting failed container; exited with code 1 Error; 4 restarts",
    );
    expect(outcome.reason).toContain("error: cannot reach the database with token ***");
    expect(outcome.reason).not.toContain("s3cret");
    expect(outcome.reason).not.toContain("p-old");

    // The record says failed: the Deployment goes back to exactly the template that served, and r2's environment goes.
    api.requests.length = 0;
    const failed = record({ current: r1 }, { id: 2, release: r2, phase: "failed", reason: outcome.reason });
    await k8s.apply(failed);
    expect(api.deployment(NAMESPACE, NAME)!.spec.template).toEqual(v1Template);
    expect(api.deployment(NAMESPACE, NAME)!.metadata.annotations["platform/rollout"]).toBe("2");
    expect(api.objectNames("configmaps", NAMESPACE)).toEqual([ENV_R1, ENV_R2].sort());
    // The rollout's own revision is kept (a restart of the same record may run it again); later ones go.
    const r3 = release("3.0.0", DIGEST_B, "r3");
    reports.environments.set("r3", { env: {}, secrets: {} });
    await k8s.apply(record({ current: r3, previous: r1 }, { id: 3, release: r3, phase: "complete" }));
    expect(api.objectNames("configmaps", NAMESPACE)).toEqual([revisionObjectName("acme", "items", "r3")]);
    expect(api.objectNames("secrets", NAMESPACE)).toEqual([revisionObjectName("acme", "items", "r3")]);
  });

  it("forwards each pod's log lines once, in order, the previous container's first after a restart", async () => {
    const k8s = backend();
    const service = record();
    await k8s.apply(service);
    addPod("p1", "r1", "1.0.0", DIGEST_A, { ready: true, state: { running: {} } });
    api.log(NAMESPACE, "p1", "listening on :8080");
    api.log(NAMESPACE, "p1", "call items.v1.List ok");
    await k8s.apply(service);
    await k8s.apply(service);
    expect(reports.lines.map((l) => `${l.replica} ${l.tag} ${l.text}`)).toEqual([
      "p1 1.0.0 listening on :8080",
      "p1 1.0.0 call items.v1.List ok",
    ]);
    expect(reports.lines[0]!.at).toBeGreaterThan(Date.now() - 60_000);
    const logRead = api.requests.filter((r) => r.path.endsWith("/pods/p1/log"));
    expect(logRead[0]!.query.get("timestamps")).toBe("true");
    expect(logRead[0]!.query.get("container")).toBe("service");
    expect(Number(logRead[0]!.query.get("limitBytes"))).toBeGreaterThan(0);
    expect(Number(logRead[0]!.query.get("tailLines"))).toBeGreaterThan(0);
    // Later reads reach back to the last line only (with the skew allowance), not the whole log.
    expect(Number(logRead.at(-1)!.query.get("sinceSeconds"))).toBeLessThanOrEqual(5);

    // The container crashed and restarted: its last words, then the new one's.
    api.log(NAMESPACE, "p1", "fatal: out of memory", { previous: true });
    api.podLogs.delete(`${NAMESPACE}/p1/service`);
    api.log(NAMESPACE, "p1", "listening on :8080 again");
    api.pods.get(`${NAMESPACE}/p1`)!.status.containerStatuses[0].restartCount = 1;
    await k8s.apply(service);
    expect(reports.lines.slice(2).map((l) => l.text)).toEqual(["fatal: out of memory", "listening on :8080 again"]);
  });

  it("remove deletes what belongs to the service only, and reports its replicas gone", async () => {
    const k8s = backend();
    await k8s.apply(record());
    reports.environments.set("r1", { env: {}, secrets: {} });
    await k8s.apply(record({ org: "other" }));
    addPod("p1", "r1", "1.0.0", DIGEST_A, { ready: true, state: { running: {} } });
    await k8s.apply(record());
    expect(k8s.services().sort()).toEqual(["acme/items", "other/items"]);

    await k8s.remove("acme", "items");
    const other = serviceObjectName("other", "items");
    expect(api.deploymentNames(NAMESPACE)).toEqual([other]);
    expect(api.objectNames("services", NAMESPACE)).toEqual([other]);
    expect(api.objectNames("configmaps", NAMESPACE)).toEqual([revisionObjectName("other", "items", "r1")]);
    expect(api.objectNames("secrets", NAMESPACE)).toEqual([revisionObjectName("other", "items", "r1")]);
    expect(reports.gone).toEqual(["p1"]);
    expect(k8s.services()).toEqual(["other/items"]);

    // A scaler that starts finds the services already in the cluster.
    const fresh = backend();
    expect(await fresh.refresh()).toEqual(["other/items"]);
  });

  it("an organization's pull credential: a dockerconfigjson Secret only its own Deployment names, kept across rollouts, removed with it", async () => {
    const PASSWORD = "pull-pa55-9d1e";
    const k8s = new KubernetesServiceBackend({ namespace: NAMESPACE, configMapName: "c", secretName: "s" }, reports, {
      kubeConfig,
      observeIntervalMs: 0,
      logIntervalMs: 0,
      pullAuth: async (org, repository) =>
        org === "acme"
          ? { source: "organization", host: repository.split("/")[0] as string, username: "team", password: PASSWORD }
          : { source: "none" },
    });
    await k8s.apply(record());
    reports.environments.set("r1", { env: {}, secrets: {} });
    await k8s.apply(record({ org: "other" }));
    const pull = pullSecretName("acme", "items");
    const secret = api.object("secrets", NAMESPACE, pull)!;
    expectValid(secret, Secret);
    expect(secret.type).toBe("kubernetes.io/dockerconfigjson");
    const config = JSON.parse(Buffer.from(secret.data[".dockerconfigjson"], "base64").toString());
    expect(config).toEqual({
      auths: { "registry.example.com": { auth: Buffer.from(`team:${PASSWORD}`).toString("base64") } },
    });
    expect(api.deployment(NAMESPACE, NAME)!.spec.template.spec.imagePullSecrets).toEqual([{ name: pull }]);
    const other = api.deployment(NAMESPACE, serviceObjectName("other", "items"))!;
    expect(other.spec.template.spec.imagePullSecrets).toBeUndefined();
    expect(api.objectNames("secrets", NAMESPACE)).not.toContain(pullSecretName("other", "items"));
    // Unchanged: nothing written again; a settled rollout's collection leaves it alone.
    api.requests.length = 0;
    await k8s.apply(record({ current: release("1.0.0", DIGEST_A, "r1") }, { phase: "complete" }));
    expect(api.writes().filter((w) => w.includes("/secrets"))).toEqual([]);
    expect(api.objectNames("secrets", NAMESPACE)).toContain(pull);
    await k8s.remove("acme", "items");
    expect(api.objectNames("secrets", NAMESPACE)).not.toContain(pull);
  });

  it("the operator's imagePullSecrets go only to services whose repository the operator lets their organization pull", async () => {
    const k8s = new KubernetesServiceBackend({ namespace: NAMESPACE, configMapName: "c", secretName: "s" }, reports, {
      kubeConfig,
      observeIntervalMs: 0,
      logIntervalMs: 0,
      imagePullSecrets: ["operator-pull"],
      operatorServes: (org, repository) =>
        operatorServes(org, repository, { hosts: [], allowedCidrs: [], operatorScopes: undefined }),
    });
    await k8s.apply(record());
    reports.environments.set("r1", { env: {}, secrets: {} });
    // Another organization deploying acme's repository, hoping the operator's credential pulls it.
    await k8s.apply(record({ org: "other" }));
    expect(api.deployment(NAMESPACE, NAME)!.spec.template.spec.imagePullSecrets).toEqual([{ name: "operator-pull" }]);
    const other = api.deployment(NAMESPACE, serviceObjectName("other", "items"))!;
    expect(other.spec.template.spec.imagePullSecrets).toBeUndefined();
    expect(other.spec.template.spec.containers[0].imagePullPolicy).toBe("Always");
  });

  it("fails a rollout whose environment the cluster refuses at once, and keeps reporting what runs", async () => {
    const k8s = backend();
    const r1 = release("1.0.0", DIGEST_A, "r1");
    await k8s.apply(record({ current: r1 }, { phase: "complete" }));
    addPod("p1", "r1", "1.0.0", DIGEST_A, { ready: true, state: { running: {} } });
    // 40 values of 32 KiB: within the record's limits, over the 1 MiB a Secret may hold.
    const big = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`CERT_${i}`, "x".repeat(32 * 1024)]));
    reports.environments.set("r2", { env: {}, secrets: big });
    const rolling = record({ current: r1 }, { id: 2, release: release("2.0.0", DIGEST_B, "r2"), cause: "restart" });
    api.requests.length = 0;
    await expect(k8s.apply(rolling)).rejects.toThrow(/create secret .* failed with 422 Invalid: .*Too long/);
    expect(reports.outcomes).toEqual([
      {
        rolloutId: 2,
        outcome: {
          phase: "failed",
          reason: expect.stringMatching(/^its environment cannot be stored in the cluster: .*Too long/),
        },
      },
    ]);
    expect(reports.outcomes[0]!.outcome.reason).not.toContain("xxxx");
    // The Deployment was left alone, and its replica is still reported.
    expect(api.writes().some((w) => w.includes("/deployments"))).toBe(false);
    expect(reports.replicas.get("p1")).toMatchObject({ state: "ready", tag: "1.0.0" });
  });

  it("surfaces API errors with the call, the status and the API's message", async () => {
    api.forbiddenNamespaces.add(NAMESPACE);
    reports.environments.set("r1", { env: {}, secrets: {} });
    // ConfigMaps are not forbidden by the fake; the Deployment listing is.
    await expect(backend().apply(record())).rejects.toThrow(
      /list service deployments in platform failed with 403 Forbidden/,
    );
    // No environment snapshot for the revision: nothing is created.
    api.forbiddenNamespaces.clear();
    api.requests.length = 0;
    await expect(backend().apply(record({}, { release: release("9.0.0", DIGEST_B, "r9") }))).rejects.toThrow(
      /no environment snapshot for r9/,
    );
    expect(api.writes()).toEqual([]);
  });
});
