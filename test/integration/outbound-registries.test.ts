/**
 * Outbound calls a tenant names (docs/security.md, "Outbound calls a tenant names"), attacked as
 * a tenant would: a user of organization beta aims the registry probe
 * (`/admin/v1/registry-credentials/source`) at loopback listeners of this machine in every
 * spelling, and the listeners count what reaches them. With the default policy nothing does (403
 * `registry_forbidden`); with the operator's PLATFORM_IMAGE_REGISTRIES only the listed registry is
 * probed, its redirect is not followed, and image records, deploys and credentials for any other
 * host are refused. Private and metadata addresses are shown refused by the resolver's decision,
 * without connecting anywhere.
 */
import { generateKeyPairSync } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { refusedRegistry, registryAddresses } from "../../src/container-images/registries.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { probe, resolveAllowed } from "../../src/outbound/guard.ts";
import { createOrg } from "../../src/orgs/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

let redis: PrivateRedis;
let ctl: Control;
let dataDir: string;
let strict: RunningGateway;
let listed: RunningGateway;
let betaKey: string;
const servers: Server[] = [];
/** What reached each listener: "<name> <method> <path>". */
const hits: string[] = [];
const ports: Record<string, number> = {};

async function listen(name: string, host: string, answer: (res: import("node:http").ServerResponse) => void) {
  const server = createServer((req, res) => {
    hits.push(`${name} ${req.method} ${req.url}`);
    answer(res);
  });
  await new Promise<void>((r) => server.listen(0, host, r));
  servers.push(server);
  ports[name] = (server.address() as { port: number }).port;
}

async function call(gateway: RunningGateway, method: string, path: string, body?: unknown) {
  const res = await fetch(`${gateway.url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${betaKey}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return {
    status: res.status,
    body: (await res.json()) as { source?: string; error?: { code: string; message: string } },
  };
}

const source = (gateway: RunningGateway, repository: string) =>
  call(gateway, "GET", `/admin/v1/registry-credentials/source?repository=${encodeURIComponent(repository)}`);

beforeAll(async () => {
  // A registry that trusts the platform, as its challenge says: what the probe looks for.
  const challenge = (res: import("node:http").ServerResponse) => {
    res.writeHead(401, { "www-authenticate": 'Bearer realm="http://127.0.0.1:1/auth/registry-token"' });
    res.end();
  };
  await listen("v4", "127.0.0.1", challenge);
  await listen("v6", "::1", challenge);
  await listen("redirecting", "127.0.0.1", (res) => {
    res.writeHead(307, { location: `http://127.0.0.1:${ports.v4}/v2/` });
    res.end();
  });
  redis = await privateRedis();
  dataDir = await mkdtemp(join(tmpdir(), "platform-outbound-"));
  ctl = connectControl(redis.url, "platform");
  await createOrg(ctl, "beta");
  betaKey = (await createApiKey(ctl, "beta-dev", "user", undefined, "beta")).key;
  // With a token key the probe runs: it asks whether a registry trusts the platform's token server.
  const keyFile = join(dataDir, "registry-token.key");
  const { privateKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
  await writeFile(keyFile, privateKey.export({ type: "sec1", format: "pem" }), { mode: 0o600 });
  const settings = (env: Record<string, string>) => ({
    ...loadSettings({ PLATFORM_DATA_DIR: dataDir, PLATFORM_REGISTRY_TOKEN_KEY: keyFile, ...env }),
    redisUrl: redis.url,
  });
  strict = await startGateway({ ctl, settings: settings({}), host: "127.0.0.1", port: 0 });
  listed = await startGateway({
    ctl,
    settings: settings({ PLATFORM_IMAGE_REGISTRIES: `127.0.0.1:${ports.redirecting},registry.example.com` }),
    host: "127.0.0.1",
    port: 0,
  });
}, 60_000);

afterAll(async () => {
  for (const s of servers) s.close();
  await strict?.close();
  await listed?.close();
  await ctl?.redis.quit();
  await redis?.stop();
  await rm(dataDir, { recursive: true, force: true });
});

describe("the registry probe, aimed by a tenant", () => {
  it("reaches no loopback listener in any spelling, and says why", async () => {
    const v4 = ports.v4;
    for (const host of [
      `127.0.0.1:${v4}`,
      `localhost:${v4}`,
      `127.1:${v4}`,
      `0x7f000001:${v4}`,
      `2130706433:${v4}`,
      `[::1]:${ports.v6}`,
    ]) {
      const r = await source(strict, `${host}/beta/x`);
      expect(r.status, host).toBe(403);
      expect(r.body.error?.code).toBe("registry_forbidden");
      expect(r.body.error?.message).toMatch(
        /at a loopback address, which image registries may not be at; the operator can allow it with PLATFORM_IMAGE_REGISTRIES=/,
      );
      // Never the address a name resolved to.
      if (!/^(127\.0\.0\.1|\[::1\])/.test(host)) expect(r.body.error?.message).not.toMatch(/127\.0\.0\.1|::1\b/);
    }
    expect(hits).toEqual([]);
  });

  it("with the operator's list: only a listed registry is probed, and its redirect is not followed", async () => {
    const r = await source(listed, `127.0.0.1:${ports.redirecting}/beta/x`);
    expect(r).toMatchObject({ status: 200, body: { source: "none" } });
    expect(hits).toEqual(["redirecting GET /v2/"]);
    const other = await source(listed, `127.0.0.1:${ports.v4}/beta/x`);
    expect(other.status).toBe(403);
    expect(other.body.error?.code).toBe("registry_not_allowed");
    expect(other.body.error?.message).toMatch(
      /^repository: images may come only from 127\.0\.0\.1:\d+, registry\.example\.com on this platform, not 127\.0\.0\.1:\d+ \(the operator's PLATFORM_IMAGE_REGISTRIES\)$/,
    );
    expect(hits).toEqual(["redirecting GET /v2/"]);
  });

  it("with the operator's list: image records, deploys and credentials name listed registries only", async () => {
    const image = (repository: string) => ({
      service: "x",
      repository,
      tag: "1.0.0-abc1234",
      digest: `sha256:${"a".repeat(64)}`,
      git_sha: "abc1234",
      dirty: false,
      version: "1.0.0",
      protos: [],
    });
    const refused = await call(listed, "POST", "/admin/v1/images", image(`127.0.0.1:${ports.v4}/beta/x`));
    expect(refused.status).toBe(403);
    expect(refused.body.error?.code).toBe("registry_not_allowed");
    expect((await call(listed, "POST", "/admin/v1/images", image("registry.example.com/beta/x"))).status).toBe(201);
    const deploy = await call(listed, "POST", "/admin/v1/services", {
      name: "x",
      tag: "1.0.0-abc1234",
      repo_type: "js",
      image_repository: "evil.example.net/beta/x",
    });
    expect(deploy.status).toBe(403);
    expect(deploy.body.error?.message).toMatch(/^image_repository: images may come only from/);
    const credential = await call(listed, "PUT", "/admin/v1/registry-credentials/evil.example.net", {
      username: "u",
      password: "p",
    });
    expect(credential.status).toBe(403);
    expect(hits).toEqual(["redirecting GET /v2/"]);
  });
});

describe("the guarded resolver's decision, without connecting", () => {
  const policy = registryAddresses("anywhere.example", { hosts: [], allowedCidrs: [], operatorScopes: undefined });
  const refuse = refusedRegistry("anywhere.example");

  it("refuses private, link-local (metadata), carrier-grade NAT and mapped addresses before any socket opens", async () => {
    for (const [address, kind] of [
      ["10.0.0.1", "private"],
      ["192.168.1.1", "private"],
      ["169.254.169.254", "link-local"],
      ["100.64.0.1", "carrier-grade NAT"],
      ["[::ffff:10.0.0.1]", "private"],
      ["[fd00::1]", "unique-local"],
    ]) {
      await expect(resolveAllowed(address as string, policy, refuse)).rejects.toThrow(`at a ${kind} address`);
      await expect(probe(new URL(`http://${address}/v2/`), { policy, refuse, timeoutMs: 1000 })).rejects.toThrow(
        `at a ${kind} address`,
      );
    }
  });

  it("allows what the operator allows: a listed host anywhere, or the ranges it names", async () => {
    const listedPolicy = registryAddresses("10.0.0.1:5000", {
      hosts: ["10.0.0.1:5000"],
      allowedCidrs: [],
      operatorScopes: undefined,
    });
    expect(await resolveAllowed("10.0.0.1", listedPolicy, refuse)).toEqual([{ address: "10.0.0.1", family: 4 }]);
    const ranges = registryAddresses("r.example", {
      hosts: [],
      allowedCidrs: ["10.0.0.0/8"],
      operatorScopes: undefined,
    });
    expect(await resolveAllowed("10.2.3.4", ranges, refuse)).toEqual([{ address: "10.2.3.4", family: 4 }]);
    await expect(resolveAllowed("192.168.0.1", ranges, refuse)).rejects.toThrow("at a private address");
  });
});
