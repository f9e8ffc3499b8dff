/**
 * The real `platform dev-center` commands (runCli) against a stand-in of the API table in
 * docs/services.md, written here: an in-memory node:http server that records what the CLI sent and
 * answers JSON built through src/services/record.ts's schemas (test/helpers/service-records.ts).
 * It stands in until the real routes are on this branch; the CLI's side is what is tested: bodies
 * and queries sent, output, exit codes (2 usage, 1 failure), `--json` as the API's JSON, `--watch`
 * and `--wait` ending on complete and on failed, `logs -f` streaming until Ctrl-C, and no secret
 * value ever in stdout or stderr.
 */
import { spawn } from "node:child_process";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { Release, Rollout, ServiceRecord } from "../../src/services/record.ts";
import { release, rollout, serviceRecord, statusReplica, T0 } from "../helpers/service-records.ts";
import { BIN, runCli } from "../helpers/stack.ts";

type Sent = { method: string; path: string; query: URLSearchParams; body: unknown; auth: string | undefined };
type Var = { name: string; value: string; version: number; updated: number; by: { id: string; name: string } };
type Status = {
  phase: Rollout["phase"];
  reason?: string;
  rollout: Rollout;
  current: Release | null;
  replicas: ReturnType<typeof statusReplica>[];
};
type Service = {
  record: ServiceRecord;
  rollouts: Rollout[];
  env: Map<string, Var>;
  secrets: Map<string, Var>;
  /** What successive GET .../status answer; the last one stays. */
  statuses: Status[];
};

const KEY = "test-key-dev-center";
const MISSING_TAG = "9.9.9-missing";
/** A secret the stand-in echoes in its error, as a careless API might: the CLI must not print it. */
const ECHOED = "ECHOED_SECRET";

let server: Server;
let baseUrl: string;
let dir: string;
let env: NodeJS.ProcessEnv;
let sent: Sent[] = [];
/** What a deployed service's status polls answer (set by a test before it deploys). */
let deployStatuses: ((first: Rollout) => Status[]) | undefined;
const services = new Map<string, Service>();

function envelope(res: ServerResponse, status: number, message: string, code: string): void {
  json(res, status, { error: { message, type: "invalid_request_error", code, param: null } });
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}

function view(s: Service) {
  const replicas = s.statuses[0]?.replicas ?? [];
  return {
    ...s.record,
    replicas,
    desired_replicas: s.record.replicas,
    rollouts: s.rollouts.slice(0, 10),
    env: [...s.env.values()],
    secrets: [...s.secrets.values()].map(({ value: _, ...rest }) => rest),
    url: `${baseUrl}/rpc`,
  };
}

function varsAnswer(vars: Map<string, Var>, secret: boolean) {
  return { data: [...vars.values()].map(({ value, ...rest }) => (secret ? rest : { ...rest, value })) };
}

/** The API table of docs/services.md, in memory. */
async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? "/", baseUrl);
  let text = "";
  for await (const chunk of req) text += chunk;
  const body = text ? JSON.parse(text) : undefined;
  sent.push({
    method: req.method ?? "",
    path: url.pathname,
    query: url.searchParams,
    body,
    auth: req.headers.authorization,
  });
  if (req.headers.authorization !== `Bearer ${KEY}`) return envelope(res, 401, "unauthorized", "invalid_api_key");

  const parts = url.pathname
    .replace(/^\/admin\/v1\/services\/?/, "")
    .split("/")
    .filter(Boolean)
    .map(decodeURIComponent);
  const [name, sub, key] = parts;
  const m = req.method;
  if (name === undefined) {
    if (m === "GET") return json(res, 200, { data: [...services.values()].map(view) });
    if (m === "POST") {
      if (services.has(body.name)) return envelope(res, 409, `service ${body.name} already exists`, "conflict");
      if (body.tag === MISSING_TAG)
        return envelope(res, 404, `no image ${body.image_repository}:${body.tag} was published`, "image_not_found");
      const first = rollout(1, body.tag);
      const record = serviceRecord(body.name, first, {
        repo_type: body.repo_type,
        image_repository: body.image_repository,
        replicas: body.replicas ?? 1,
        port: body.port ?? 8080,
      });
      services.set(body.name, {
        record,
        rollouts: [first],
        env: new Map(),
        secrets: new Map(),
        statuses: deployStatuses?.(first) ?? [{ phase: "progressing", rollout: first, current: null, replicas: [] }],
      });
      return json(res, 201, view(services.get(body.name) as Service));
    }
  }
  const s = name === undefined ? undefined : services.get(name);
  if (!s) return envelope(res, 404, `no service "${name}"`, "not_found");
  if (sub === undefined) {
    if (m === "GET") return json(res, 200, view(s));
    if (m === "DELETE") {
      services.delete(name as string);
      return json(res, 200, { deleted: true });
    }
  }
  if (sub === "overview" && m === "PUT") {
    s.record.overview = body.markdown;
    return json(res, 200, view(s));
  }
  if (sub === "rollouts" && m === "GET") return json(res, 200, { data: s.rollouts });
  if (sub === "rollouts" && m === "POST") {
    const id = s.rollouts.length + 1;
    const current = s.record.current?.tag ?? s.record.rollout.release.tag;
    const tag = body.tag ?? (body.undo ? (s.record.previous?.tag ?? current) : current);
    const cause = body.restart ? "restart" : body.undo ? "undo" : "start";
    const r = rollout(id, tag, { cause, from_tag: current });
    s.rollouts.unshift(r);
    s.record.rollout = r;
    return json(res, 202, r);
  }
  if (sub === "status" && m === "GET") {
    const next = s.statuses.length > 1 ? s.statuses.shift() : s.statuses[0];
    return json(res, 200, next);
  }
  if (sub === "logs" && m === "GET") return logs(req, res, url.searchParams);
  if (sub === "env" || sub === "secrets") {
    const vars = sub === "env" ? s.env : s.secrets;
    if (m === "GET" && key === undefined) return json(res, 200, varsAnswer(vars, sub === "secrets"));
    if (m === "PUT" && key === undefined) {
      const values = body.values as Record<string, string>;
      if (values[ECHOED] !== undefined)
        return envelope(res, 400, `value "${values[ECHOED]}" of ${ECHOED} is not accepted`, "invalid_value");
      for (const [k, v] of Object.entries(values)) {
        const version = (vars.get(k)?.version ?? 0) + 1;
        vars.set(k, { name: k, value: v, version, updated: T0, by: { id: "key_1", name: "ana" } });
      }
      return json(res, 200, varsAnswer(vars, sub === "secrets"));
    }
    if (m === "DELETE" && key !== undefined) {
      if (!vars.delete(key)) return envelope(res, 404, `no ${sub} ${key}`, "not_found");
      return json(res, 200, { deleted: true });
    }
  }
  envelope(res, 404, `no route ${m} ${url.pathname}`, "not_found");
}

/** Two lines at once; with follow, a `tick <n>` line every 100 ms until the client goes. */
function logs(req: IncomingMessage, res: ServerResponse, query: URLSearchParams): void {
  res.writeHead(200, { "content-type": "application/x-ndjson" });
  const line = (text: string, replica = "items-r1-a") =>
    res.write(`${JSON.stringify({ at: Date.now(), replica, tag: "1.0.0-abc123", text })}\n`);
  line("listening on 8080\n");
  line("GET /healthz 200", "items-r1-b");
  if (query.get("follow") !== "true") return void res.end();
  let n = 0;
  const timer = setInterval(() => line(`tick ${++n}`), 100);
  req.socket.once("close", () => clearInterval(timer));
}

/** Deploys `name` into the stand-in directly (no CLI), serving `tag` with two ready replicas. */
function seed(name: string, tag = "1.0.0-abc123"): Service {
  const first = rollout(1, tag, { phase: "complete", finished: T0 + 90_000 });
  const s: Service = {
    record: serviceRecord(name, first, { current: release(tag), overview: "# Items\n\nStores items.\n" }),
    rollouts: [first],
    env: new Map(),
    secrets: new Map(),
    statuses: [
      {
        phase: "complete",
        rollout: first,
        current: release(tag),
        replicas: [statusReplica(`${name}-r1-a`, tag, "ready"), statusReplica(`${name}-r1-b`, tag, "ready")],
      },
    ],
  };
  services.set(name, s);
  return s;
}

const cli = (...args: string[]) => runCli(["dev-center", ...args], env, dir);
/** What the CLI sent, without its reads of the status (polls). */
const writes = () => sent.filter((r) => r.method !== "GET");

beforeAll(async () => {
  server = createServer((req, res) => void handle(req, res).catch((e) => envelope(res, 500, String(e), "internal")));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  dir = await mkdtemp(join(tmpdir(), "platform-dev-center-"));
  env = {
    ...process.env,
    PLATFORM_CONFIG_DIR: join(dir, "config"),
    PLATFORM_BASE_URL: baseUrl,
    PLATFORM_API_KEY: KEY,
  };
});

afterAll(async () => {
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r));
  await rm(dir, { recursive: true, force: true });
});

beforeEach(() => {
  sent = [];
  deployStatuses = undefined;
  services.clear();
});

describe("service deploy", () => {
  it("posts the service and prints what started", async () => {
    const r = await cli(
      "service",
      "deploy",
      "items",
      "--tag",
      "1.0.0-abc123",
      "--repo-type",
      "js",
      "--image-repository",
      "localhost:5000/acme/items",
      "--replicas",
      "2",
      "--port",
      "9000",
      "--env",
      "LOG_LEVEL=debug",
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("deploying items:1.0.0-abc123 (rollout 1) from localhost:5000/acme/items, 2 replica(s)");
    expect(r.stdout).toContain("platform dev-center rollout status items --watch");
    expect(writes()).toHaveLength(1);
    expect(sent[0]).toMatchObject({ method: "POST", path: "/admin/v1/services", auth: `Bearer ${KEY}` });
    expect(sent[0]?.body).toEqual({
      name: "items",
      tag: "1.0.0-abc123",
      repo_type: "js",
      image_repository: "localhost:5000/acme/items",
      replicas: 2,
      port: 9000,
      env: { LOG_LEVEL: "debug" },
    });
  });

  it("takes the image repository and repo type from the workspace", async () => {
    const ws = join(dir, "ws-items");
    await mkdir(join(ws, "src"), { recursive: true });
    await writeFile(
      join(ws, ".platformrc.json"),
      JSON.stringify({
        registryUrl: baseUrl,
        orgId: "acme",
        language: "python",
        imageRepository: "localhost:5000/acme/py-items",
      }),
    );
    const r = await runCli(["dev-center", "service", "deploy", "items", "--tag", "1.0.0-abc123"], env, join(ws, "src"));
    expect(r.code, r.stderr).toBe(0);
    expect(sent[0]?.body).toMatchObject({ repo_type: "python", image_repository: "localhost:5000/acme/py-items" });
  });

  it("outside a workspace, a missing --repo-type or --image-repository is a usage error and nothing is sent", async () => {
    const noType = await cli(
      "service",
      "deploy",
      "items",
      "--tag",
      "1.0.0-abc123",
      "--image-repository",
      "localhost:5000/a/b",
    );
    expect(noType.code).toBe(2);
    expect(noType.stderr).toMatch(/--repo-type js\|python is needed outside a workspace/);
    const noRepo = await cli("service", "deploy", "items", "--tag", "1.0.0-abc123", "--repo-type", "js");
    expect(noRepo.code).toBe(2);
    expect(noRepo.stderr).toMatch(/--image-repository <host\/path> is needed/);
    const badName = await cli(
      "service",
      "deploy",
      "Items!",
      "--tag",
      "1.0.0",
      "--repo-type",
      "js",
      "--image-repository",
      "localhost:5000/a/b",
    );
    expect(badName.code).toBe(2);
    expect(badName.stderr).toMatch(/<name> "Items!": expected a service name/);
    const badReplicas = await cli(
      "service",
      "deploy",
      "items",
      "--tag",
      "1.0.0",
      "--repo-type",
      "js",
      "--image-repository",
      "localhost:5000/a/b",
      "--replicas",
      "50",
    );
    expect(badReplicas.code).toBe(2);
    expect(badReplicas.stderr).toMatch(
      /--replicas <n>' argument '50' is invalid\. expected a whole number from 1 to 20/,
    );
    expect(sent).toEqual([]);
  });

  it("prints the API's errors as other commands do (exit 1)", async () => {
    seed("items");
    const args = ["--repo-type", "js", "--image-repository", "localhost:5000/acme/items"];
    const exists = await cli("service", "deploy", "items", "--tag", "1.0.0-abc123", ...args);
    expect(exists.code).toBe(1);
    expect(exists.stderr.trim()).toBe("error: service items already exists (conflict)");
    const missing = await cli("service", "deploy", "other", "--tag", MISSING_TAG, ...args);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/was published \(image_not_found\)/);
    const unknown = await cli("service", "show", "nope");
    expect(unknown.code).toBe(1);
    expect(unknown.stderr.trim()).toBe('error: no service "nope" (not_found)');
  });

  it("--wait follows the rollout to complete", async () => {
    deployStatuses = (first) => [
      {
        phase: "progressing",
        rollout: first,
        current: null,
        replicas: [statusReplica("items-r1-a", "1.0.0-abc123", "starting")],
      },
      {
        phase: "complete",
        rollout: { ...first, phase: "complete" },
        current: first.release,
        replicas: [statusReplica("items-r1-a", "1.0.0-abc123", "ready")],
      },
    ];
    const r = await cli(
      "service",
      "deploy",
      "items",
      "--tag",
      "1.0.0-abc123",
      "--repo-type",
      "js",
      "--image-repository",
      "localhost:5000/acme/items",
      "--wait",
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/rollout 1 \(deploy 1.0.0-abc123\): progressing; replicas: 1 starting/);
    expect(r.stdout).toMatch(/items-r1-a 1.0.0-abc123 sha256:[0-9a-f]{12} ready, restarts 0/);
    expect(r.stdout).toContain("rollout 1 complete: items serves 1.0.0-abc123");
  });
});

describe("service list, show, delete, overview", () => {
  it("lists services as a table, and --json prints exactly the API's JSON", async () => {
    seed("items");
    seed("orders", "2.0.0-def456");
    const table = await cli("service", "list");
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(/NAME\s.*TAG\s.*READY\/DESIRED\s.*PHASE\s.*URL/);
    expect(table.stdout).toMatch(/items\s.*1\.0\.0-abc123\s.*2\/2\s.*complete\s.*\/rpc/);
    expect(table.stdout).toMatch(/orders\s.*2\.0\.0-def456/);
    const asJson = await cli("service", "list", "--json");
    const answer = await (
      await fetch(`${baseUrl}/admin/v1/services`, { headers: { authorization: `Bearer ${KEY}` } })
    ).json();
    expect(JSON.parse(asJson.stdout)).toEqual(answer);
  });

  it("shows a service: record, replicas, rollouts, env and secret names, overview", async () => {
    const s = seed("items");
    s.env.set("LOG_LEVEL", {
      name: "LOG_LEVEL",
      value: "debug",
      version: 1,
      updated: T0,
      by: { id: "k", name: "ana" },
    });
    s.secrets.set("DB_PASSWORD", {
      name: "DB_PASSWORD",
      value: "pw-never-shown",
      version: 3,
      updated: T0,
      by: { id: "k", name: "ana" },
    });
    const r = await cli("service", "show", "items");
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/service\s+items \(js, owner ana\)/);
    expect(r.stdout).toMatch(/serving\s+1\.0\.0-abc123 \(sha256:/);
    expect(r.stdout).toMatch(/replicas\s+2\/2 ready/);
    expect(r.stdout).toMatch(/env\s+LOG_LEVEL/);
    expect(r.stdout).toMatch(/secrets\s+DB_PASSWORD \(v3\)/);
    expect(r.stdout).toMatch(/items-r1-a\s.*ready/);
    expect(r.stdout).toMatch(/overview:\n {2}# Items\n {2}Stores items\./);
    expect(r.stdout).not.toContain("pw-never-shown");
  });

  it("deletes without asking", async () => {
    seed("items");
    const r = await cli("service", "delete", "items");
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe("deleted items");
    expect(sent.map((x) => `${x.method} ${x.path}`)).toEqual(["DELETE /admin/v1/services/items"]);
  });

  it("sets the overview from a file, refusing one over 64 KiB before sending", async () => {
    seed("items");
    const readme = join(dir, "README.md");
    await writeFile(readme, "# Items\n\nA service.\n");
    const ok = await cli("service", "overview", "set", "items", "--file", readme);
    expect(ok.code, ok.stderr).toBe(0);
    expect(sent[0]).toMatchObject({
      method: "PUT",
      path: "/admin/v1/services/items/overview",
      body: { markdown: "# Items\n\nA service.\n" },
    });
    const big = join(dir, "BIG.md");
    await writeFile(big, "x".repeat(64 * 1024 + 1));
    sent = [];
    const tooBig = await cli("service", "overview", "set", "items", "--file", big);
    expect(tooBig.code).toBe(2);
    expect(tooBig.stderr).toMatch(/BIG\.md is 64 KiB: an overview holds at most 64 KiB/);
    const none = await cli("service", "overview", "set", "items", "--file", join(dir, "nope.md"));
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/nope\.md: no such file/);
    expect(sent).toEqual([]);
  });
});

describe("rollout", () => {
  it("starts a tag, a restart and an undo; a tag with --restart, or neither, is a usage error", async () => {
    seed("items");
    const tag = await cli("rollout", "start", "items", "1.1.0-bbb222");
    expect(tag.code, tag.stderr).toBe(0);
    expect(tag.stdout).toContain("rolling out items:1.1.0-bbb222 (rollout 2: 1.0.0-abc123 → 1.1.0-bbb222)");
    const restart = await cli("rollout", "start", "items", "--restart");
    expect(restart.code, restart.stderr).toBe(0);
    expect(restart.stdout).toContain("restarting items:");
    const undo = await cli("rollout", "undo", "items");
    expect(undo.code, undo.stderr).toBe(0);
    expect(undo.stdout).toContain("undoing items:");
    expect(sent.map((x) => x.body)).toEqual([{ tag: "1.1.0-bbb222" }, { restart: true }, { undo: true }]);
    sent = [];
    expect((await cli("rollout", "start", "items", "1.1.0", "--restart")).code).toBe(2);
    expect((await cli("rollout", "start", "items")).code).toBe(2);
    expect((await cli("rollout", "start", "items", ".bad-tag")).code).toBe(2);
    expect(sent).toEqual([]);
  });

  it("status shows the phase, the failure's reason and each replica", async () => {
    const s = seed("items");
    const failed = rollout(2, "1.1.0-bbb222", {
      from_tag: "1.0.0-abc123",
      phase: "failed",
      reason: "exit code 1: cannot connect to the database",
    });
    s.statuses = [
      {
        phase: "failed",
        reason: "exit code 1: cannot connect to the database",
        rollout: failed,
        current: release("1.0.0-abc123"),
        replicas: [
          statusReplica("items-r2-a", "1.1.0-bbb222", "crashed", 3),
          statusReplica("items-r1-a", "1.0.0-abc123", "ready"),
        ],
      },
    ];
    const r = await cli("rollout", "status", "items");
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/rollout 2 \(1\.0\.0-abc123 → 1\.1\.0-bbb222\): failed; replicas: 1 crashed, 1 ready/);
    expect(r.stdout).toContain("reason: exit code 1: cannot connect to the database");
    expect(r.stdout).toMatch(/items-r2-a\s.*1\.1\.0-bbb222\s.*sha256:[0-9a-f]{12}\s.*crashed\s.*3/);
    const j = await cli("rollout", "status", "items", "--json");
    expect(JSON.parse(j.stdout)).toEqual(JSON.parse(JSON.stringify(s.statuses[0])));
  });

  it("--watch prints changes and ends with exit 0 on complete", async () => {
    const s = seed("items");
    const next = rollout(2, "1.1.0-bbb222", { from_tag: "1.0.0-abc123" });
    const old = statusReplica("items-r1-a", "1.0.0-abc123", "ready");
    s.statuses = [
      {
        phase: "progressing",
        rollout: next,
        current: release("1.0.0-abc123"),
        replicas: [old, statusReplica("items-r2-a", "1.1.0-bbb222", "starting")],
      },
      {
        phase: "progressing",
        rollout: next,
        current: release("1.0.0-abc123"),
        replicas: [old, statusReplica("items-r2-a", "1.1.0-bbb222", "ready")],
      },
      {
        phase: "complete",
        rollout: { ...next, phase: "complete" },
        current: next.release,
        replicas: [statusReplica("items-r2-a", "1.1.0-bbb222", "ready")],
      },
    ];
    const r = await cli("rollout", "status", "items", "--watch");
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trim().split("\n");
    expect(lines[0]).toBe("rollout 2 (1.0.0-abc123 → 1.1.0-bbb222): progressing; replicas: 1 ready, 1 starting");
    // The old replica's line is printed once: only what changed is printed again.
    expect(lines.filter((l) => /items-r1-a .* ready/.test(l))).toHaveLength(1);
    expect(lines.filter((l) => /items-r2-a .* starting/.test(l))).toHaveLength(1);
    expect(lines.filter((l) => /items-r2-a .* ready/.test(l))).toHaveLength(1);
    expect(lines).toContain("  items-r1-a gone");
    expect(lines.at(-1)).toBe("rollout 2 complete: items serves 1.1.0-bbb222");
    expect(sent.filter((x) => x.path.endsWith("/status"))).toHaveLength(3);
  });

  it("--watch ends with exit 1 and the reason on failed", async () => {
    const s = seed("items");
    const next = rollout(2, "1.1.0-bbb222", { from_tag: "1.0.0-abc123" });
    s.statuses = [
      {
        phase: "progressing",
        rollout: next,
        current: release("1.0.0-abc123"),
        replicas: [statusReplica("items-r2-a", "1.1.0-bbb222", "starting")],
      },
      {
        phase: "failed",
        reason: "readiness probe failed for 120s",
        rollout: { ...next, phase: "failed" },
        current: release("1.0.0-abc123"),
        replicas: [statusReplica("items-r2-a", "1.1.0-bbb222", "crashed", 4)],
      },
    ];
    const r = await cli("rollout", "status", "items", "--watch");
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/items-r2-a .* crashed, restarts 4/);
    expect(r.stderr).toContain("error: rollout 2 failed: readiness probe failed for 120s\n1.0.0-abc123 keeps serving");
  });

  it("history: a table, and --json as the API sent it", async () => {
    const s = seed("items");
    s.rollouts.unshift(
      rollout(2, "1.1.0-bbb222", { from_tag: "1.0.0-abc123", phase: "complete", started: T0, finished: T0 + 42_000 }),
    );
    const r = await cli("rollout", "history", "items");
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/ID\s.*TAG\s.*CAUSE\s.*PHASE\s.*STARTED\s.*DURATION\s.*BY/);
    expect(r.stdout).toMatch(/2\s.*1\.1\.0-bbb222\s.*start\s.*complete\s.*2026-01-02T03:04:05Z\s.*42s\s.*ana/);
    expect(r.stdout).toMatch(/1\s.*1\.0\.0-abc123\s.*deploy\s.*complete/);
    const j = await cli("rollout", "history", "items", "--json");
    expect(JSON.parse(j.stdout)).toEqual({ data: JSON.parse(JSON.stringify(s.rollouts)) });
  });
});

describe("logs", () => {
  it("prints each line as [replica tag] text, passing --tail, --since and --replica", async () => {
    seed("items");
    const r = await cli("logs", "items", "--tail", "50", "--since", "2h", "--replica", "items-r1-a");
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe("[items-r1-a 1.0.0-abc123] listening on 8080\n[items-r1-b 1.0.0-abc123] GET /healthz 200\n");
    expect(Object.fromEntries(sent[0]?.query ?? [])).toEqual({ tail: "50", since: "120m", replica: "items-r1-a" });
    expect((await cli("logs", "items", "--since", "yesterday")).code).toBe(2);
  });

  it("-f prints lines as they come, and Ctrl-C ends it with exit 0", async () => {
    seed("items");
    const child = spawn(process.execPath, [BIN, "dev-center", "logs", "items", "-f"], { env, cwd: dir });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
    await expect.poll(() => out, { timeout: 20_000 }).toMatch(/tick 3\n/);
    expect(out.startsWith("[items-r1-a 1.0.0-abc123] listening on 8080\n")).toBe(true);
    expect(sent[0]?.query.get("follow")).toBe("true");
    child.kill("SIGINT");
    expect(await exited, err).toBe(0);
  });
});

describe("secrets and env", () => {
  const SECRET_A = "s3cret-value-alpha";
  const SECRET_B = "s3cret-value-bravo";

  it("secrets set from arguments and a file; list shows names and versions; no value is printed", async () => {
    seed("items");
    const file = join(dir, "prod.env");
    await writeFile(file, `# production\nDB_PASSWORD=${SECRET_B}\nAPI_TOKEN="${SECRET_A}-file"\n`);
    const set = await cli("secrets", "set", "items", `API_TOKEN=${SECRET_A}`, "--from-file", file);
    expect(set.code, set.stderr).toBe(0);
    expect(sent[0]).toMatchObject({ method: "PUT", path: "/admin/v1/services/items/secrets" });
    // Arguments win over the file.
    expect(sent[0]?.body).toEqual({ values: { DB_PASSWORD: SECRET_B, API_TOKEN: SECRET_A } });
    expect(set.stdout).toContain("set secret API_TOKEN (version 1)");
    expect(set.stdout).toContain("takes effect at the next rollout: platform dev-center rollout start items --restart");
    const again = await cli("secrets", "set", "items", `API_TOKEN=${SECRET_B}`);
    expect(again.stdout).toContain("set secret API_TOKEN (version 2)");

    const list = await cli("secrets", "list", "items");
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/NAME\s.*VERSION\s.*UPDATED\s.*BY/);
    expect(list.stdout).toMatch(/API_TOKEN\s.*2\s.*2026-01-02T03:04:05Z\s.*ana/);
    const listJson = await cli("secrets", "list", "items", "--json");
    expect(
      JSON.parse(listJson.stdout)
        .data.map((e: { name: string }) => e.name)
        .sort(),
    ).toEqual(["API_TOKEN", "DB_PASSWORD"]);

    const unset = await cli("secrets", "unset", "items", "API_TOKEN");
    expect(unset.code, unset.stderr).toBe(0);
    expect(unset.stdout).toContain("unset secret API_TOKEN\ntakes effect at the next rollout");
    expect(sent.at(-1)).toMatchObject({ method: "DELETE", path: "/admin/v1/services/items/secrets/API_TOKEN" });
    const gone = await cli("secrets", "unset", "items", "API_TOKEN");
    expect(gone.code).toBe(1);
    expect(gone.stderr).toMatch(/not_found/);

    for (const r of [set, again, list, listJson, unset, gone]) {
      for (const secret of [SECRET_A, SECRET_B]) {
        expect(r.stdout).not.toContain(secret);
        expect(r.stderr).not.toContain(secret);
      }
    }
  });

  it("a bad key or line is a usage error naming it, nothing is sent, and no value is printed", async () => {
    seed("items");
    const badKey = await cli("secrets", "set", "items", `GOOD=${SECRET_A}`, `1BAD=${SECRET_B}`);
    expect(badKey.code).toBe(2);
    expect(badKey.stderr).toMatch(/argument 2: "1BAD": expected a variable name/);
    const bare = await cli("secrets", "set", "items", SECRET_A);
    expect(bare.code).toBe(2);
    const file = join(dir, "bad.env");
    await writeFile(file, `A=1\n\n${SECRET_B}\n`);
    const badLine = await cli("secrets", "set", "items", "--from-file", file);
    expect(badLine.code).toBe(2);
    expect(badLine.stderr.trim()).toBe(`error: ${file}:3: expected KEY=VALUE`);
    const reserved = await cli("env", "unset", "items", "PORT");
    expect(reserved.code).toBe(2);
    expect(sent).toEqual([]);
    for (const r of [badKey, bare, badLine])
      for (const secret of [SECRET_A, SECRET_B]) expect(`${r.stdout}${r.stderr}`).not.toContain(secret);
  });

  it("an API error that echoes a secret's value is printed without it", async () => {
    seed("items");
    const r = await cli("secrets", "set", "items", `${ECHOED}=${SECRET_A}`);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`value "***" of ${ECHOED} is not accepted (invalid_value)`);
    expect(`${r.stdout}${r.stderr}`).not.toContain(SECRET_A);
  });

  it("env set, list (with values) and unset", async () => {
    seed("items");
    const set = await cli("env", "set", "items", "LOG_LEVEL=debug", "FEATURE_X=on");
    expect(set.code, set.stderr).toBe(0);
    expect(sent[0]).toMatchObject({
      method: "PUT",
      path: "/admin/v1/services/items/env",
      body: { values: { LOG_LEVEL: "debug", FEATURE_X: "on" } },
    });
    expect(set.stdout).toContain("set variable LOG_LEVEL (version 1)");
    expect(set.stdout).toContain("takes effect at the next rollout: platform dev-center rollout start items --restart");
    const list = await cli("env", "list", "items");
    expect(list.stdout).toMatch(/NAME\s.*VALUE\s.*VERSION\s.*UPDATED\s.*BY/);
    expect(list.stdout).toMatch(/LOG_LEVEL\s.*debug\s.*1/);
    const unset = await cli("env", "unset", "items", "LOG_LEVEL", "FEATURE_X");
    expect(unset.code, unset.stderr).toBe(0);
    expect(sent.slice(-2).map((x) => `${x.method} ${x.path}`)).toEqual([
      "DELETE /admin/v1/services/items/env/LOG_LEVEL",
      "DELETE /admin/v1/services/items/env/FEATURE_X",
    ]);
  });
});
