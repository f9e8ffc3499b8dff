/**
 * A small stand-in for the Kubernetes API server, answering like the real one
 * for the calls the Kubernetes backend makes: apps/v1 Deployments (list, get,
 * create, replace, delete), their `scale` subresource, and reading a Pod; and
 * `/version`, which `platform doctor` asks.
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

export class FakeKubernetesApi {
  readonly requests: RecordedRequest[] = [];
  /** Namespaces where the caller's service account has no rights, answered like RBAC does. */
  readonly forbiddenNamespaces = new Set<string>();
  readonly pods = new Map<string, Json>();
  private readonly deployments = new Map<string, Json>();
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

  private send(res: ServerResponse, code: number, body: Json): void {
    res.writeHead(code, { "content-type": "application/json" });
    res.end(JSON.stringify(body));
  }

  private route(method: string, url: URL, contentType: string | undefined, body: Json): [number, Json] {
    if (url.pathname === "/version" && method === "GET")
      return [200, { major: "1", minor: "33", gitVersion: "v1.33.0", platform: "linux/amd64" }];
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
