/**
 * A small stand-in for the Kubernetes API server, answering like the real one
 * for the calls the Kubernetes backends make: apps/v1 Deployments (list, get,
 * create, replace, delete), their `scale` subresource; Pods (read, list by label,
 * a container's log); ConfigMaps, Secrets and Services (list by label, get, create,
 * replace, delete), as the services backend writes them; and `/version`, which
 * `platform doctor` asks.
 * It records every request so tests can assert on what went over the wire.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface RecordedRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  contentType: string | undefined;
  authorization: string | undefined;
  body: unknown;
}

type Json = Record<string, any>;

const DEPLOYMENTS = /^\/apis\/apps\/v1\/namespaces\/([^/]+)\/deployments(?:\/([^/]+)(\/scale)?)?$/;
const POD = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)$/;
const PODS = /^\/api\/v1\/namespaces\/([^/]+)\/pods$/;
const POD_LOG = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/log$/;
/** The core kinds the services backend creates, by their resource name. */
const CORE = /^\/api\/v1\/namespaces\/([^/]+)\/(configmaps|secrets|services)(?:\/([^/]+))?$/;
const CORE_KINDS: Record<string, string> = { configmaps: "ConfigMap", secrets: "Secret", services: "Service" };
const MERGE_PATCH_TYPES = ["application/merge-patch+json", "application/strategic-merge-patch+json"];

function status(code: number, reason: string, message: string, details: Json = {}): Json {
  return {
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: code < 400 ? "Success" : "Failure",
    message,
    reason,
    details,
    code,
  };
}

function matchesSelector(labels: Record<string, string> | undefined, selector: string | null): boolean {
  if (!selector) return true;
  return selector.split(",").every((term) => {
    const negated = term.split("!=");
    if (negated.length === 2) return labels?.[negated[0]!] !== negated[1];
    const [key, value] = term.split(/==?/);
    return labels?.[key!] === value;
  });
}

/** One line a container printed, as the kubelet keeps it (its time as RFC 3339 with nanoseconds). */
export type FakeLogLine = { time: string; text: string };

/** RFC 3339 with nanoseconds, trailing zeros of the fraction dropped, as the kubelet writes log timestamps. */
export function kubeletTimestamp(ms: number, extraNanos = 0): string {
  const iso = new Date(Math.floor(ms)).toISOString(); // 2025-01-01T00:00:00.123Z
  const nanos = String((Math.floor(ms) % 1000) * 1_000_000 + extraNanos).padStart(9, "0");
  const fraction = nanos.replace(/0+$/, "");
  return `${iso.slice(0, 19)}${fraction ? `.${fraction}` : ""}Z`;
}

export class FakeKubernetesApi {
  readonly requests: RecordedRequest[] = [];
  /** Namespaces where the caller's service account has no rights, answered like RBAC does. */
  readonly forbiddenNamespaces = new Set<string>();
  /** `<namespace>/<name>` → the Pod as the API returns it; tests put pods here. */
  readonly pods = new Map<string, Json>();
  /**
   * `<namespace>/<pod>/<container>` (the running container) or `.../previous` (the one before
   * its last restart) → its lines; a pod without an entry answers like a container still waiting.
   */
  readonly podLogs = new Map<string, FakeLogLine[]>();
  private readonly deployments = new Map<string, Json>();
  /** `<resource>/<namespace>/<name>` → a ConfigMap, Secret or Service. */
  private readonly objects = new Map<string, Json>();
  private clusterIps = 0;
  private readonly server = createServer((req, res) => void this.handle(req, res));
  private resourceVersion = 100;

  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  deployment(namespace: string, name: string): Json | undefined {
    return this.deployments.get(`${namespace}/${name}`);
  }

  deploymentNames(namespace: string): string[] {
    return [...this.deployments.values()]
      .filter((d) => d.metadata.namespace === namespace)
      .map((d) => d.metadata.name)
      .sort();
  }

  /** What the Deployment controller would write once pods pass their readiness probes. */
  setReady(namespace: string, name: string, ready: number): void {
    const d = this.deployments.get(`${namespace}/${name}`);
    if (!d) throw new Error(`no deployment ${namespace}/${name}`);
    d.status = { ...d.status, replicas: d.spec.replicas, readyReplicas: ready, availableReplicas: ready };
  }

  /** Merges `status` into a Deployment's, as the Deployment controller writes it (conditions, replica counts). */
  setDeploymentStatus(namespace: string, name: string, status: Json): void {
    const d = this.deployments.get(`${namespace}/${name}`);
    if (!d) throw new Error(`no deployment ${namespace}/${name}`);
    d.status = { ...d.status, ...status };
  }

  /** A ConfigMap, Secret or Service as stored (a Secret's stringData turned into base64 `data`, as the API server does). */
  object(resource: "configmaps" | "secrets" | "services", namespace: string, name: string): Json | undefined {
    return this.objects.get(`${resource}/${namespace}/${name}`);
  }

  objectNames(resource: "configmaps" | "secrets" | "services", namespace: string): string[] {
    return [...this.objects.values()]
      .filter((o) => o.kind === CORE_KINDS[resource] && o.metadata.namespace === namespace)
      .map((o) => o.metadata.name)
      .sort();
  }

  /** Appends a line to a container's log, at `time` (epoch ms; default now). */
  log(
    namespace: string,
    pod: string,
    text: string,
    options: { container?: string; previous?: boolean; at?: number } = {},
  ): void {
    const key = `${namespace}/${pod}/${options.container ?? "service"}${options.previous ? "/previous" : ""}`;
    const lines = this.podLogs.get(key) ?? [];
    // Lines printed within one millisecond stay ordered: the kubelet's clock has nanoseconds.
    lines.push({ time: kubeletTimestamp(options.at ?? Date.now(), lines.length + 1), text });
    this.podLogs.set(key, lines);
  }

  /** Requests that change state, as "METHOD path" lines. */
  writes(): string[] {
    return this.requests.filter((r) => r.method !== "GET").map((r) => `${r.method} ${r.path}`);
  }

  private nextVersion(): string {
    this.resourceVersion += 1;
    return String(this.resourceVersion);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString("utf8");
    const url = new URL(req.url ?? "/", "http://fake");
    let body: unknown;
    if (text.length > 0) {
      try {
        body = JSON.parse(text);
      } catch {
        return this.send(res, 400, status(400, "BadRequest", "the request body is not valid JSON"));
      }
    }
    this.requests.push({
      method: req.method ?? "GET",
      path: url.pathname,
      query: url.searchParams,
      contentType: req.headers["content-type"],
      authorization: req.headers.authorization,
      body,
    });
    const [code, answer] = this.route(req.method ?? "GET", url, req.headers["content-type"], body as Json);
    this.send(res, code, answer);
  }

  private send(res: ServerResponse, code: number, body: Json | string): void {
    if (typeof body === "string") {
      res.writeHead(code, { "content-type": "text/plain" });
      res.end(body);
      return;
    }
    res.writeHead(code, { "content-type": "application/json" });
    res.end(JSON.stringify(body));
  }

  private route(method: string, url: URL, contentType: string | undefined, body: Json): [number, Json | string] {
    if (url.pathname === "/version" && method === "GET")
      return [200, { major: "1", minor: "33", gitVersion: "v1.33.0", platform: "linux/amd64" }];
    const podList = PODS.exec(url.pathname);
    if (podList && method === "GET") {
      const items = [...this.pods.values()].filter(
        (p) =>
          p.metadata.namespace === podList[1] &&
          matchesSelector(p.metadata.labels, url.searchParams.get("labelSelector")),
      );
      return [
        200,
        { kind: "PodList", apiVersion: "v1", metadata: { resourceVersion: String(this.resourceVersion) }, items },
      ];
    }
    const podLog = POD_LOG.exec(url.pathname);
    if (podLog && method === "GET") return this.readLog(podLog[1]!, podLog[2]!, url.searchParams);
    const core = CORE.exec(url.pathname);
    if (core) return this.core(method, core[1]!, core[2]!, core[3], body, url.searchParams.get("labelSelector"));
    const pod = POD.exec(url.pathname);
    if (pod && method === "GET") {
      const found = this.pods.get(`${pod[1]}/${pod[2]}`);
      return found
        ? [200, found]
        : [404, status(404, "NotFound", `pods "${pod[2]}" not found`, { name: pod[2], kind: "pods" })];
    }
    const m = DEPLOYMENTS.exec(url.pathname);
    if (!m) return [404, status(404, "NotFound", "the server could not find the requested resource")];
    const [, namespace, name, scale] = m as unknown as [string, string, string | undefined, string | undefined];
    if (this.forbiddenNamespaces.has(namespace)) {
      const verb =
        { GET: name ? "get" : "list", POST: "create", PUT: "update", PATCH: "patch", DELETE: "delete" }[method] ??
        method;
      return [
        403,
        status(
          403,
          "Forbidden",
          `deployments.apps${name ? ` "${name}"` : ""} is forbidden: User "system:serviceaccount:${namespace}:platform-scaler" cannot ${verb} resource "deployments${scale ? "/scale" : ""}" in API group "apps" in the namespace "${namespace}"`,
          { group: "apps", kind: "deployments" },
        ),
      ];
    }
    if (!name) {
      if (method === "GET") return [200, this.list(namespace, url.searchParams.get("labelSelector"))];
      if (method === "POST") return this.create(namespace, body);
      return [405, status(405, "MethodNotAllowed", `${method} is not supported on the collection`)];
    }
    const key = `${namespace}/${name}`;
    const existing = this.deployments.get(key);
    const notFound = status(404, "NotFound", `deployments.apps "${name}" not found`, {
      name,
      group: "apps",
      kind: "deployments",
    });
    if (!existing) return [404, notFound];
    if (scale) return this.scale(method, contentType, existing, body);
    if (method === "GET") return [200, existing];
    if (method === "PUT") return this.replace(key, existing, body);
    if (method === "DELETE") {
      this.deployments.delete(key);
      return [200, status(200, "", "", { name, group: "apps", kind: "deployments", uid: existing.metadata.uid })];
    }
    return [405, status(405, "MethodNotAllowed", `${method} is not supported here`)];
  }

  /** GET .../pods/<pod>/log: the query parameters the kubelet honours, applied in its order (since, tail, limit). */
  private readLog(namespace: string, name: string, query: URLSearchParams): [number, Json | string] {
    const pod = this.pods.get(`${namespace}/${name}`);
    if (!pod) return [404, status(404, "NotFound", `pods "${name}" not found`, { name, kind: "pods" })];
    const containers: string[] = (pod.spec?.containers ?? []).map((c: Json) => c.name);
    const container = query.get("container") ?? (containers.length === 1 ? containers[0] : undefined);
    if (!container || !containers.includes(container)) {
      return [
        400,
        status(
          400,
          "BadRequest",
          `a container name must be specified for pod ${name}, choose one of: [${containers.join(" ")}]`,
        ),
      ];
    }
    const previous = query.get("previous") === "true";
    let lines = this.podLogs.get(`${namespace}/${name}/${container}${previous ? "/previous" : ""}`);
    if (!lines) {
      const message = previous
        ? `previous terminated container "${container}" in pod "${name}" not found`
        : `container "${container}" in pod "${name}" is waiting to start: ContainerCreating`;
      return [400, status(400, "BadRequest", message)];
    }
    const sinceSeconds = query.get("sinceSeconds");
    if (sinceSeconds !== null) {
      const from = Date.now() - Number(sinceSeconds) * 1000;
      lines = lines.filter((l) => Date.parse(l.time) >= from);
    }
    const tail = query.get("tailLines");
    if (tail !== null) lines = lines.slice(Math.max(0, lines.length - Number(tail)));
    let text = lines.map((l) => `${query.get("timestamps") === "true" ? `${l.time} ` : ""}${l.text}\n`).join("");
    const limit = query.get("limitBytes");
    if (limit !== null) text = Buffer.from(text).subarray(0, Number(limit)).toString("utf8");
    return [200, text];
  }

  /** ConfigMaps, Secrets and Services: list by label, get, create, replace, delete. */
  private core(
    method: string,
    namespace: string,
    resource: string,
    name: string | undefined,
    body: Json,
    selector: string | null,
  ): [number, Json] {
    const kind = CORE_KINDS[resource]!;
    if (!name) {
      if (method === "GET") {
        const items = [...this.objects.values()].filter(
          (o) => o.kind === kind && o.metadata.namespace === namespace && matchesSelector(o.metadata.labels, selector),
        );
        return [
          200,
          { kind: `${kind}List`, apiVersion: "v1", metadata: { resourceVersion: String(this.resourceVersion) }, items },
        ];
      }
      if (method !== "POST")
        return [405, status(405, "MethodNotAllowed", `${method} is not supported on the collection`)];
      if (body?.kind !== kind || typeof body?.metadata?.name !== "string")
        return [422, status(422, "Invalid", `${kind} is invalid: metadata.name: Required value`)];
      const key = `${resource}/${namespace}/${body.metadata.name}`;
      if (this.objects.has(key))
        return [
          409,
          status(409, "AlreadyExists", `${resource} "${body.metadata.name}" already exists`, {
            name: body.metadata.name,
            kind: resource,
          }),
        ];
      const stored = this.stored(kind, body);
      const size = Object.values((stored.data ?? {}) as Record<string, string>).reduce(
        (n, v) => n + (kind === "Secret" ? Buffer.from(v, "base64").length : Buffer.byteLength(v)),
        0,
      );
      if (size > 1024 * 1024)
        return [
          422,
          status(
            422,
            "Invalid",
            `${kind} "${body.metadata.name}" is invalid: []: Too long: must have at most 1048576 bytes`,
          ),
        ];
      stored.metadata = {
        ...stored.metadata,
        namespace,
        uid: `uid-${this.resourceVersion}`,
        resourceVersion: this.nextVersion(),
        creationTimestamp: "2025-01-01T00:00:00Z",
      };
      if (kind === "Service") {
        this.clusterIps += 1;
        stored.spec = { ...stored.spec, clusterIP: `10.96.0.${this.clusterIps}` };
      }
      this.objects.set(key, stored);
      return [201, stored];
    }
    const key = `${resource}/${namespace}/${name}`;
    const existing = this.objects.get(key);
    if (!existing) return [404, status(404, "NotFound", `${resource} "${name}" not found`, { name, kind: resource })];
    if (method === "GET") return [200, existing];
    if (method === "DELETE") {
      this.objects.delete(key);
      return [200, status(200, "", "", { name, kind: resource, uid: existing.metadata.uid })];
    }
    if (method !== "PUT") return [405, status(405, "MethodNotAllowed", `${method} is not supported here`)];
    const sent = body?.metadata?.resourceVersion;
    if (sent !== undefined && sent !== existing.metadata.resourceVersion)
      return [
        409,
        status(
          409,
          "Conflict",
          `Operation cannot be fulfilled on ${resource} "${name}": the object has been modified; please apply your changes to the latest version and try again`,
        ),
      ];
    const stored = this.stored(kind, body);
    if (existing.immutable && JSON.stringify(stored.data ?? {}) !== JSON.stringify(existing.data ?? {}))
      return [
        422,
        status(
          422,
          "Invalid",
          `${kind} "${name}" is invalid: data: Forbidden: field is immutable when \`immutable\` is set`,
        ),
      ];
    stored.metadata = {
      ...stored.metadata,
      namespace,
      uid: existing.metadata.uid,
      creationTimestamp: existing.metadata.creationTimestamp,
      resourceVersion: this.nextVersion(),
    };
    // The API server keeps an allocated cluster IP when an update leaves it out.
    if (kind === "Service")
      stored.spec = { ...stored.spec, clusterIP: stored.spec?.clusterIP ?? existing.spec.clusterIP };
    this.objects.set(key, stored);
    return [200, stored];
  }

  /** What the API server keeps of a body: a Secret's stringData merged into base64 `data`. */
  private stored(kind: string, body: Json): Json {
    const stored = structuredClone(body);
    if (kind === "Secret" && stored.stringData) {
      stored.data = { ...stored.data };
      for (const [k, v] of Object.entries(stored.stringData as Record<string, string>))
        stored.data[k] = Buffer.from(v).toString("base64");
      delete stored.stringData;
    }
    return stored;
  }

  private list(namespace: string, selector: string | null): Json {
    const items = [...this.deployments.values()].filter(
      (d) => d.metadata.namespace === namespace && matchesSelector(d.metadata.labels, selector),
    );
    return {
      kind: "DeploymentList",
      apiVersion: "apps/v1",
      metadata: { resourceVersion: String(this.resourceVersion) },
      items,
    };
  }

  private invalid(body: Json): Json | undefined {
    const name = body?.metadata?.name;
    if (body?.kind !== "Deployment" || typeof name !== "string") {
      return status(422, "Invalid", "Deployment.apps is invalid: metadata.name: Required value");
    }
    const selector: Record<string, string> = body.spec?.selector?.matchLabels ?? {};
    const labels: Record<string, string> = body.spec?.template?.metadata?.labels ?? {};
    if (Object.entries(selector).some(([k, v]) => labels[k] !== v)) {
      return status(
        422,
        "Invalid",
        `Deployment.apps "${name}" is invalid: spec.template.metadata.labels: Invalid value: \`selector\` does not match template \`labels\``,
      );
    }
    return undefined;
  }

  private create(namespace: string, body: Json): [number, Json] {
    const invalid = this.invalid(body);
    if (invalid) return [422, invalid];
    const key = `${namespace}/${body.metadata.name}`;
    if (this.deployments.has(key)) {
      return [
        409,
        status(409, "AlreadyExists", `deployments.apps "${body.metadata.name}" already exists`, {
          name: body.metadata.name,
        }),
      ];
    }
    const stored = structuredClone(body);
    stored.metadata = {
      ...stored.metadata,
      namespace,
      uid: `uid-${this.resourceVersion}`,
      resourceVersion: this.nextVersion(),
      generation: 1,
      creationTimestamp: "2025-01-01T00:00:00Z",
    };
    stored.status = { observedGeneration: 1, replicas: 0 };
    this.deployments.set(key, stored);
    return [201, stored];
  }

  private replace(key: string, existing: Json, body: Json): [number, Json] {
    const invalid = this.invalid(body);
    if (invalid) return [422, invalid];
    const sent = body.metadata.resourceVersion;
    if (sent !== undefined && sent !== existing.metadata.resourceVersion) {
      return [
        409,
        status(
          409,
          "Conflict",
          `Operation cannot be fulfilled on deployments.apps "${existing.metadata.name}": the object has been modified; please apply your changes to the latest version and try again`,
        ),
      ];
    }
    const stored = structuredClone(body);
    stored.metadata = {
      ...stored.metadata,
      namespace: existing.metadata.namespace,
      uid: existing.metadata.uid,
      creationTimestamp: existing.metadata.creationTimestamp,
      resourceVersion: this.nextVersion(),
      generation: existing.metadata.generation + 1,
    };
    stored.status = existing.status;
    this.deployments.set(key, stored);
    return [200, stored];
  }

  private scale(method: string, contentType: string | undefined, existing: Json, body: Json): [number, Json] {
    if (method === "PATCH") {
      if (!MERGE_PATCH_TYPES.includes(contentType ?? "")) {
        return [
          415,
          status(
            415,
            "UnsupportedMediaType",
            `the body of the request was in an unknown format - accepted media types include: ${MERGE_PATCH_TYPES.join(", ")}`,
          ),
        ];
      }
      const replicas = body?.spec?.replicas;
      if (!Number.isInteger(replicas) || replicas < 0) {
        return [
          422,
          status(
            422,
            "Invalid",
            `Scale.autoscaling "${existing.metadata.name}" is invalid: spec.replicas: Invalid value: ${JSON.stringify(replicas)}`,
          ),
        ];
      }
      existing.spec.replicas = replicas;
      existing.metadata.resourceVersion = this.nextVersion();
    } else if (method !== "GET") {
      return [405, status(405, "MethodNotAllowed", `${method} is not supported on deployments/scale by this fake`)];
    }
    return [
      200,
      {
        kind: "Scale",
        apiVersion: "autoscaling/v1",
        metadata: {
          name: existing.metadata.name,
          namespace: existing.metadata.namespace,
          resourceVersion: existing.metadata.resourceVersion,
        },
        spec: { replicas: existing.spec.replicas },
        status: {
          replicas: existing.status?.replicas ?? 0,
          selector: Object.entries(existing.spec.selector.matchLabels)
            .map(([k, v]) => `${k}=${v}`)
            .join(","),
        },
      },
    ];
  }
}
