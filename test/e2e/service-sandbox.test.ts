/**
 * A tenant's service tries to leave its sandbox (issue 38; docs/security.md, "Service sandbox and
 * replica network"), on `platform up`'s local backend with the unshare runner. The Node scaffold,
 * published with a probe added to its entry point and its Dockerfile's USER removed (so it names
 * no user: before the sandbox it ran as root), tries at start: reading the host's files through
 * /proc/1/root and directly (the data directory, the secrets key, a world-readable file in the
 * host's /tmp), listing the host's processes, connecting to Redis's and the gateway's loopback
 * ports and to another replica's, and it reports its uid, capabilities and no_new_privs; `service
 * env` gives it a PATH whose first folder holds trap `sh`, `mount`, `unshare`, `perl`, `socat`
 * and `ip` (they would leave a marker if a host helper ran one). Every escape fails, the trap is
 * never sprung, LD_PRELOAD through `service env` is refused naming it, and the same service
 * answers its RPCs through the gateway.
 *
 * Real parts: `platform up`, Debian's docker-registry with htpasswd, buildah (private vfs storage)
 * and the stand-in base image, skopeo. Skipped, saying why, where the image tools, the npm
 * registry or root are missing.
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeItemsWorkspace } from "../helpers/protos.ts";
import {
  imageToolsUnavailable,
  type PrivateBuildah,
  privateBuildah,
  pullAuthFile,
  pushBaseImage,
  type Registry,
  startRegistry,
} from "../helpers/registry.ts";
import { npmInstall, npmRegistryUnavailable } from "../helpers/scaffold.ts";
import { type OwnStack, runCli, startStack } from "../helpers/stack.ts";

const unavailable =
  process.getuid?.() !== 0
    ? "the unshare runner needs root"
    : (imageToolsUnavailable() ?? (await npmRegistryUnavailable()));
if (unavailable) console.warn(`service sandbox test skipped: ${unavailable}`);

const USER = "team";
const PASSWORD = `pw-${process.pid}-${Date.now()}`;
const ITEMS = "platform.items.v1.ItemService";

/** Runs at the service's start, before it serves: one `SANDBOX-PROBE {json}` line per attempt. */
const PROBE = `// @ts-nocheck
/* eslint-disable */
import fs from "node:fs";
import net from "node:net";
const report = (name, outcome) => console.log("SANDBOX-PROBE " + JSON.stringify({ name, ...outcome }));
const attempt = (name, f) => {
  try { report(name, { ok: true, value: f() }); } catch (e) { report(name, { ok: false, error: e.code ?? String(e) }); }
};
for (const p of JSON.parse(process.env.PROBE_PATHS ?? "[]")) {
  attempt("read /proc/1/root" + p, () => fs.readFileSync("/proc/1/root" + p, "utf8").length);
  attempt("read " + p, () => fs.readFileSync(p, "utf8").length);
}
attempt("list /proc/1/root" + (process.env.PROBE_DIR ?? "/"), () => fs.readdirSync("/proc/1/root" + (process.env.PROBE_DIR ?? "/")));
attempt("processes", () =>
  fs.readdirSync("/proc").filter((d) => /^\\d+$/.test(d)).map((d) => {
    try { return fs.readFileSync("/proc/" + d + "/cmdline", "utf8").split("\\0").join(" ").trim(); } catch { return "?"; }
  }),
);
attempt("status", () =>
  fs.readFileSync("/proc/self/status", "utf8").split("\\n").filter((l) => /^(Uid|CapEff|CapPrm|CapBnd|NoNewPrivs):/.test(l)).map((l) => l.replace(/\\s+/g, " ")),
);
for (const [name, port] of Object.entries(JSON.parse(process.env.PROBE_PORTS ?? "{}"))) {
  const socket = net.connect({ host: "127.0.0.1", port: Number(port) });
  socket.setTimeout(3000, () => { socket.destroy(); report("connect " + name, { ok: false, error: "timeout" }); });
  socket.once("connect", () => { socket.destroy(); report("connect " + name, { ok: true }); });
  socket.once("error", (e) => report("connect " + name, { ok: false, error: e.code }));
}
`;

type Probe = { name: string; ok: boolean; value?: unknown; error?: string };

let stack: OwnStack;
let registry: Registry;
let buildah: PrivateBuildah;
let work: string;
let trap: string;
let hostFile: string;
let env: NodeJS.ProcessEnv;
let devKey: string;

const cli = (args: string[], input?: string) => runCli(args, env, work, input);
const git = (...args: string[]) =>
  execFileSync("git", ["-c", "user.name=Team", "-c", "user.email=team@example.com", ...args], {
    cwd: work,
    encoding: "utf8",
  }).trim();

async function rpc(method: string, body: unknown) {
  const res = await fetch(`${stack.baseUrl}/rpc/${ITEMS}/${method}`, {
    method: "POST",
    headers: { "content-type": "application/json", "connect-protocol-version": "1", authorization: `Bearer ${devKey}` },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

/** The probe lines of the service's log, by replica. */
async function probes(): Promise<Map<string, Probe[]>> {
  const logs = await cli(["dev-center", "logs", "items", "--tail", "500"]);
  const byReplica = new Map<string, Probe[]>();
  for (const line of logs.stdout.split("\n")) {
    const m = /^\[(\S+) [^\]]+\] SANDBOX-PROBE (.*)$/.exec(line);
    if (!m) continue;
    const list = byReplica.get(m[1] as string) ?? [];
    try {
      list.push(JSON.parse(m[2] as string) as Probe);
    } catch {
      // A line cut at the log's 4 KiB: what it holds is large (the host's process list, say) and says it leaked.
      list.push({ name: /"name":"([^"]*)"/.exec(m[2] as string)?.[1] ?? "?", ok: true, value: m[2] });
    }
    byReplica.set(m[1] as string, list);
  }
  return byReplica;
}

describe.skipIf(unavailable !== undefined)("a tenant's service cannot leave its sandbox", () => {
  beforeAll(async () => {
    registry = await startRegistry({ [USER]: PASSWORD });
    const pullAuth = await pullAuthFile(registry, USER, PASSWORD);
    stack = await startStack({
      env: {
        PLATFORM_IMAGE_PULL_AUTH_FILE: pullAuth,
        PLATFORM_ROLLOUT_DEADLINE_MS: "90000",
        PLATFORM_SERVICE_RUNTIME: "unshare",
      },
    });
    expect((await stack.admin("POST", "/admin/v1/orgs", { id: "acme" })).status).toBe(201);
    devKey = (
      await stack.admin<{ key: string }>("POST", "/admin/v1/keys", { name: "acme-dev", org: "acme", role: "user" })
    ).body.key;
    buildah = await privateBuildah();
    const baseImage = await pushBaseImage(buildah, registry, USER, PASSWORD, "node");
    work = await mkdtemp(join(tmpdir(), "platform-sandbox-"));
    // World-readable, in a world-searchable folder: only the sandbox stands between it and the service.
    hostFile = join(tmpdir(), `platform-sandbox-host-${process.pid}.txt`);
    await writeFile(hostFile, "the host's own file\n", { mode: 0o644 });
    trap = join(tmpdir(), `platform-sandbox-trap-${process.pid}`);
    await mkdir(trap, { recursive: true });
    await chmod(trap, 0o755);
    for (const tool of ["sh", "mount", "unshare", "perl", "socat", "ip", "env"]) {
      await writeFile(
        join(trap, tool),
        `#!/bin/sh\necho ${tool} >> ${join(trap, "sprung")}\nexec /usr/bin/${tool} "$@"\n`,
      );
      await chmod(join(trap, tool), 0o755);
    }
    await writeItemsWorkspace(work, {
      registryUrl: stack.baseUrl,
      imageRepository: `${registry.host}/acme/items`,
      build: { builder: "buildah", args: { NODE_IMAGE: baseImage } },
    });
    env = {
      ...buildah.env,
      PLATFORM_BASE_URL: undefined,
      PLATFORM_API_KEY: devKey,
      PLATFORM_CONFIG_DIR: join(work, ".config"),
    };
    expect((await cli(["proto", "publish"])).code).toBe(0);
    const login = await cli(["registry", "login", "--username", USER, "--password-stdin"], `${PASSWORD}\n`);
    expect(login.code, login.stderr).toBe(0);
  }, 300_000);

  afterAll(async () => {
    await stack?.stop();
    await registry?.stop();
    await buildah?.remove();
    if (work) await rm(work, { recursive: true, force: true });
    if (trap) await rm(trap, { recursive: true, force: true });
    if (hostFile) await rm(hostFile, { force: true });
  }, 120_000);

  it("the service deploys and answers through the gateway while every escape at its start fails", async () => {
    expect((await cli(["service", "create", "items", "--lang", "node", "--example"])).code).toBe(0);
    // No USER: the image names no user, which ran as root before the sandbox.
    const dockerfile = await readFile(join(work, "Dockerfile"), "utf8");
    await writeFile(join(work, "Dockerfile"), dockerfile.replace(/^USER .*$/m, ""));
    await writeFile(join(work, "src/probe.ts"), PROBE);
    const index = await readFile(join(work, "src/index.ts"), "utf8");
    await writeFile(join(work, "src/index.ts"), index.replace(/^import /m, 'import "./probe.js";\nimport '));
    await npmInstall({}, "npm ci", work);
    git("add", "-A");
    git("commit", "-q", "-m", "a service that tries to escape");
    const published = await cli(["publish"]);
    expect(published.code, published.stderr).toBe(0);
    const tag = /^pushed \S+:(\S+)@sha256:/m.exec(published.stdout)?.[1] as string;

    const redisPort = new URL(stack.redisUrl).port;
    const gatewayPort = new URL(stack.baseUrl).port;
    const deployed = await cli([
      "dev-center",
      "service",
      "deploy",
      "items",
      "--tag",
      tag,
      "--wait",
      "--env",
      `PROBE_PATHS=${JSON.stringify([hostFile, join(stack.dataDir, "secrets.key")])}`,
      "--env",
      `PROBE_DIR=${stack.dataDir}`,
      "--env",
      `PROBE_PORTS=${JSON.stringify({ redis: redisPort, gateway: gatewayPort })}`,
      "--env",
      `PATH=${trap}:/usr/local/bin:/usr/bin:/bin`,
    ]);
    expect(deployed.code, `${deployed.stdout}${deployed.stderr}\n${stack.output()}`).toBe(0);

    // Its RPCs answer through the gateway.
    const created = await rpc("CreateItem", { name: "lamp", description: "from inside the sandbox" });
    expect(created.status).toBe(200);
    expect(await rpc("GetItem", { id: created.body.item.id })).toEqual({ status: 200, body: created.body });

    let seen: Probe[] = [];
    await expect
      .poll(async () => {
        seen = [...(await probes()).values()][0] ?? [];
        return seen.filter((p) => p.name.startsWith("connect ")).length;
      })
      .toBe(2);
    const byName = Object.fromEntries(seen.map((p) => [p.name, p]));
    console.log(`the sandboxed service's attempts:\n${seen.map((p) => JSON.stringify(p)).join("\n")}`);
    // The host's files: neither through /proc/1/root nor by their path.
    for (const path of [hostFile, join(stack.dataDir, "secrets.key")]) {
      expect(byName[`read /proc/1/root${path}`]).toMatchObject({ ok: false });
      expect(byName[`read ${path}`]).toMatchObject({ ok: false, error: "ENOENT" });
    }
    expect(byName[`list /proc/1/root${stack.dataDir}`]).toMatchObject({ ok: false });
    // Its own processes alone: its init and itself (and what it started), none of the host's.
    const processes = byName.processes?.value as string[];
    expect(processes.length).toBeLessThanOrEqual(4);
    expect(processes.join("\n")).not.toMatch(/redis-server|vitest|bin\/platform|skopeo/);
    expect(processes).toContain("platform-init");
    // Unprivileged (the image names no user), no capability in any set, no_new_privs.
    expect(byName.status?.value).toEqual(
      expect.arrayContaining([
        "Uid: 65534 65534 65534 65534",
        "CapPrm: 0000000000000000",
        "CapEff: 0000000000000000",
        "CapBnd: 0000000000000000",
        "NoNewPrivs: 1",
      ]),
    );
    // The host's loopback listeners are not its loopback.
    expect(byName["connect redis"]).toMatchObject({ ok: false, error: "ECONNREFUSED" });
    expect(byName["connect gateway"]).toMatchObject({ ok: false, error: "ECONNREFUSED" });
    // Its PATH reached its own command only: no host helper ran a trap.
    expect(existsSync(join(trap, "sprung"))).toBe(false);
  }, 900_000);

  it("another replica's port is out of reach; LD_PRELOAD through service env is refused, naming it", async () => {
    const status = JSON.parse((await cli(["dev-center", "service", "show", "items", "--json"])).stdout);
    const first = (status.replicas ?? status.data?.replicas ?? []).find((r: { url?: string }) => r.url) as
      | { id: string; url: string }
      | undefined;
    expect(first, JSON.stringify(status)).toBeDefined();
    const peerPort = new URL(first?.url as string).port;
    // Refused by the CLI as bad input (exit 2); the API refuses it as well (services-api.test.ts).
    const refused = await cli(["dev-center", "env", "set", "items", "LD_PRELOAD=/tmp/evil.so"]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/LD_PRELOAD.*names starting with "LD_" steer the system's dynamic loader/);
    const set = await cli(["dev-center", "env", "set", "items", `PROBE_PORTS=${JSON.stringify({ peer: peerPort })}`]);
    expect(set.code, set.stderr).toBe(0);
    // The restart's new replica starts while the first still serves on that port.
    const restarted = await cli(["dev-center", "rollout", "start", "items", "--restart", "--wait"]);
    expect(restarted.code, `${restarted.stdout}${restarted.stderr}`).toBe(0);
    let peer: Probe | undefined;
    await expect
      .poll(async () => {
        for (const [replica, list] of await probes())
          if (replica !== first?.id) peer = list.find((p) => p.name === "connect peer");
        return peer;
      })
      .toBeDefined();
    expect(peer).toMatchObject({ ok: false, error: "ECONNREFUSED" });
    expect((await rpc("ListItems", {})).status).toBe(200);
  }, 300_000);
});
