/**
 * Pulls aimed by a tenant (scaler/container-images/pull.ts with the registry policy, docs/security.md,
 * "Outbound calls a tenant names"), with the real skopeo: a repository on a loopback listener of
 * this machine is refused before skopeo runs; a registry the operator lists that redirects the
 * pull to another loopback listener (by a name, so skopeo asks the guarded proxy) gets nothing
 * through, and the error names the registry and the reason in the platform's words, never what
 * the registry sent.
 */
import { execFileSync } from "node:child_process";
import { chmodSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { createServer as createTcpServer, type Server as TcpServer } from "node:net";
import { lookup } from "node:dns/promises";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registryAddresses } from "../../src/container-images/registries.ts";
import type { RegistryPolicy } from "../../src/settings/registries.ts";
import { pullImage } from "../../scaler/container-images/pull.ts";

const hasSkopeo = (() => {
  try {
    execFileSync("skopeo", ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
})();

/** Whether this machine lets a process have a network namespace of its own (as the isolated pull needs). */
const canIsolate = (() => {
  try {
    const user = process.getuid?.() === 0 ? [] : ["--user", "--map-root-user"];
    execFileSync("unshare", [...user, "--net", "--", "sh", "-c", "ip link set lo up"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
})();

const DIGEST = `sha256:${"b".repeat(64)}`;
const SECRET_WORDS = "the-registry-says-this-and-it-must-not-be-echoed";
let cacheDir: string;
let registry: Server;
let registryHost: string;
let target: TcpServer;
let targetPort: number;
/** Connections that reached the listener the pull was redirected to. */
let reached = 0;
const asked: string[] = [];

/**
 * A name (not `localhost`, which Go's proxy rules exempt, nor a literal) that resolves to loopback
 * here: the machine's own name, as /etc/hosts usually maps it. Undefined where none does.
 */
async function loopbackName(): Promise<string | undefined> {
  for (const name of [hostname(), "vm", "runsc"]) {
    const found = await lookup(name, { all: true }).catch(() => []);
    if (found.length > 0 && found.every((a) => a.address.startsWith("127."))) return name;
  }
  return undefined;
}
const redirectName = await loopbackName();

const policy = (hosts: string[]): RegistryPolicy => ({ hosts, allowedCidrs: [], operatorScopes: undefined });
const addresses = (p: RegistryPolicy) => (host: string) => registryAddresses(host, p);

beforeAll(async () => {
  cacheDir = await mkdtemp(join(tmpdir(), "platform-pull-guarded-"));
  target = createTcpServer((socket) => {
    reached++;
    socket.destroy();
  });
  await new Promise<void>((r) => target.listen(0, "127.0.0.1", r));
  targetPort = (target.address() as { port: number }).port;
  // A registry whose manifests are "elsewhere": a name for loopback, over https.
  registry = createServer((req, res) => {
    asked.push(`${req.method} ${req.url}`);
    if (req.url === "/v2/") {
      res.writeHead(200, { "docker-distribution-api-version": "registry/2.0", "content-type": "application/json" });
      return res.end("{}");
    }
    res.writeHead(307, { location: `https://${redirectName}:${targetPort}/stolen`, "x-note": SECRET_WORDS });
    res.end(SECRET_WORDS);
  });
  await new Promise<void>((r) => registry.listen(0, "127.0.0.1", r));
  registryHost = `127.0.0.1:${(registry.address() as { port: number }).port}`;
});

afterAll(async () => {
  registry?.close();
  target?.close();
  await rm(cacheDir, { recursive: true, force: true });
});

describe.skipIf(!hasSkopeo)("pulls a tenant aims (skopeo through the guarded proxy)", () => {
  it("refuses a loopback registry before skopeo runs, in every spelling", async () => {
    for (const host of [`127.0.0.1:${targetPort}`, `localhost:${targetPort}`, `127.1:${targetPort}`]) {
      const failed = await pullImage({
        repository: `${host}/beta/x`,
        digest: DIGEST,
        cacheDir,
        addresses: addresses(policy([])),
        skopeo: "/nonexistent/skopeo", // never reached: the refusal comes first
      }).catch((e: Error) => e);
      expect((failed as Error).message).toBe(
        `pulling ${host}/beta/x@${DIGEST} failed: ${host} is at a loopback address, which image registries may not be at (the operator allows one with PLATFORM_IMAGE_REGISTRIES or PLATFORM_IMAGE_REGISTRIES_ALLOWED_ADDRESSES)`,
      );
    }
    expect(reached).toBe(0);
  });

  it.skipIf(redirectName === undefined)(
    "a listed registry's redirect to a loopback name reaches nothing, and the error echoes nothing it sent (skipped where no name of this machine resolves to loopback)",
    async () => {
      const failed = await pullImage({
        repository: `${registryHost}/beta/x`,
        digest: DIGEST,
        cacheDir,
        addresses: addresses(policy([registryHost])),
      }).catch((e: Error) => e);
      expect(asked.some((a) => a.startsWith("GET /v2/beta/x/manifests/"))).toBe(true);
      expect(reached).toBe(0);
      expect((failed as Error).message).toBe(
        `pulling ${registryHost}/beta/x@${DIGEST} failed: a connection of the pull went to a loopback address, which image registries may not be at (${registryHost} redirected there, or its name changed address)`,
      );
      expect((failed as Error).message).not.toContain(SECRET_WORDS);
    },
    60_000,
  );

  it.skipIf(redirectName === undefined || !canIsolate)(
    "off loopback (skipped without a loopback name or network namespaces), skopeo runs where the host's loopback is not: what Go dials itself reaches nothing, and the proxy is its only way out",
    async () => {
      const work = await mkdtemp(join(tmpdir(), "platform-pull-isolated-"));
      // A stand-in skopeo doing what a redirect can make Go do: dial a loopback literal itself
      // (Go never proxies those), then ask the proxy for a loopback name.
      const standIn = join(work, "skopeo");
      const script = `
const net = require("node:net");
const direct = net.connect(${targetPort}, "127.0.0.1");
direct.on("connect", () => { console.error("reached the host's loopback"); process.exit(3); });
direct.on("error", () => {
  const proxy = new URL(process.env.HTTPS_PROXY);
  const p = net.connect(Number(proxy.port), proxy.hostname, () =>
    p.write("CONNECT ${redirectName}:${targetPort} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"));
  p.on("data", (d) => { console.error(String(d).split("\\r\\n")[0]); process.exit(1); });
  p.on("error", () => process.exit(2));
});`;
      writeFileSync(standIn, `#!/bin/sh\nexec '${process.execPath}' -e '${script.replace(/'/g, "'\\''")}'\n`);
      chmodSync(standIn, 0o755);
      const registryName = `${redirectName}:${registryHost.split(":")[1]}`;
      try {
        const failed = await pullImage({
          repository: `${registryName}/beta/x`,
          digest: DIGEST,
          cacheDir,
          addresses: addresses(policy([registryName])),
          skopeo: standIn,
        }).catch((e: Error) => e);
        expect(reached).toBe(0);
        expect((failed as Error).message).toBe(
          `pulling ${registryName}/beta/x@${DIGEST} failed: a connection of the pull went to a loopback address, which image registries may not be at (${registryName} redirected there, or its name changed address)`,
        );
      } finally {
        await rm(work, { recursive: true, force: true });
      }
    },
    60_000,
  );
});
