/**
 * An organization's image-pull credentials (/admin/v1/registry-credentials, docs/services.md,
 * "Pulling from a private registry") through a real gateway and Redis: only an admin sets or
 * removes one; the password is sealed at rest (no Redis key holds it) and never in an answer;
 * another organization sees none and removes none (404); inputs are bounded. Then which
 * credential a pull gets (the organization's, a pull grant from the platform's token server for a
 * registry whose challenge names it, the operator's file, none), what a grant buys at the token
 * server (pull on its repository only), and the auth file a pull reads (0600, gone after).
 */
import { generateKeyPairSync } from "node:crypto";
import { existsSync, statSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { createOrg } from "../../src/orgs/store.ts";
import { loadTokenKey, mintPullGrant } from "../../src/registry-credentials/grant.ts";
import { MAX_HOSTS_PER_ORG } from "../../src/registry-credentials/names.ts";
import { PullAuthResolver } from "../../src/registry-credentials/resolve.ts";
import { RegistryCredentials } from "../../src/registry-credentials/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { SecretBox } from "../../src/services/secrets.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { withAuthFile } from "../../scaler/backends/services/pull-auth.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const PASSWORD = "pull-pa55-never-shown-9d1e";
const HOST = "registry.test:5000";

let redis: PrivateRedis;
let ctl: Control;
let dataDir: string;
let gateway: RunningGateway;
let settings: ReturnType<typeof loadSettings>;
let trusting: Server;
let trustingHost: string;
const keys: Record<string, string> = {};
const everyAnswer: string[] = [];

async function call(who: string, method: string, path: string, body?: unknown) {
  const res = await fetch(`${gateway.url}/admin/v1/registry-credentials${path}`, {
    method,
    headers: {
      authorization: `Bearer ${keys[who]}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  everyAnswer.push(text);
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

async function everyRedisValue(): Promise<string> {
  const out: string[] = [];
  for (const key of await ctl.redis.keys("*")) {
    const type = await ctl.redis.type(key);
    if (type === "string") out.push((await ctl.redis.get(key)) ?? "");
    if (type === "hash") out.push(JSON.stringify(await ctl.redis.hgetall(key)));
  }
  return out.join("\n");
}

beforeAll(async () => {
  redis = await privateRedis();
  dataDir = await mkdtemp(join(tmpdir(), "platform-registry-credentials-"));
  const keyFile = join(dataDir, "registry-token.key");
  const { privateKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
  await writeFile(keyFile, privateKey.export({ type: "sec1", format: "pem" }), { mode: 0o600 });
  const operatorFile = join(dataDir, "operator-auth.json");
  await writeFile(operatorFile, JSON.stringify({ auths: { "operator.test:5000": { auth: "eDp5" } } }));
  settings = {
    ...loadSettings({
      PLATFORM_DATA_DIR: dataDir,
      PLATFORM_REGISTRY_TOKEN_KEY: keyFile,
      PLATFORM_IMAGE_PULL_AUTH_FILE: operatorFile,
      // The trusting registry below listens on loopback: allowed here as `platform up` allows it
      // (test/integration/outbound-registries.test.ts shows the default refusing it).
      PLATFORM_IMAGE_REGISTRIES_ALLOWED_ADDRESSES: "127.0.0.1",
    }),
    redisUrl: redis.url,
  };
  ctl = connectControl(redis.url, settings.prefix);
  for (const org of ["acme", "rival"]) {
    await createOrg(ctl, org);
    keys[org] = (await createApiKey(ctl, `${org}-admin`, "admin", undefined, org)).key;
    keys[`${org}-dev`] = (await createApiKey(ctl, `${org}-dev`, "user", undefined, org)).key;
  }
  gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });
  // A registry that trusts the platform's token server, as far as its challenge says.
  trusting = createServer((_req, res) => {
    res.writeHead(401, {
      "www-authenticate": `Bearer realm="${gateway.url}/auth/registry-token",service="trusting.test"`,
    });
    res.end();
  });
  await new Promise<void>((r) => trusting.listen(0, "127.0.0.1", r));
  trustingHost = `127.0.0.1:${(trusting.address() as { port: number }).port}`;
}, 60_000);

afterAll(async () => {
  trusting?.close();
  await gateway?.close();
  await ctl?.redis.quit();
  await redis?.stop();
  await rm(dataDir, { recursive: true, force: true });
});

describe("/admin/v1/registry-credentials", () => {
  it("only an admin of the organization sets one", async () => {
    const r = await call("acme-dev", "PUT", `/${HOST}`, { username: "team", password: PASSWORD });
    expect(r.status).toBe(403);
    expect(r.body.error.message).toMatch(/only an admin of the organization/);
    expect((await call("acme-dev", "DELETE", `/${HOST}`)).status).toBe(403);
  });

  it("sets, replaces and lists it without the password", async () => {
    const created = await call("acme", "PUT", `/${HOST}`, { username: "team", password: PASSWORD });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ host: HOST, username: "team", by: { name: "acme-admin" } });
    const replaced = await call("acme", "PUT", `/${HOST.toUpperCase()}`, { username: "team2", password: PASSWORD });
    expect(replaced.status).toBe(200);
    const listed = await call("acme-dev", "GET", "");
    expect(listed.status).toBe(200);
    expect(listed.body.data).toEqual([
      {
        host: HOST,
        username: "team2",
        updated: expect.any(Number),
        by: { id: expect.any(String), name: "acme-admin" },
      },
    ]);
  });

  it("seals the password at rest: no Redis key holds it, and it opens only for its organization and host", async () => {
    expect(await everyRedisValue()).not.toContain(PASSWORD);
    const box = await SecretBox.load(settings.services);
    const store = new RegistryCredentials(ctl, async () => box);
    expect(await store.open("acme", HOST)).toEqual({ username: "team2", password: PASSWORD });
    // The sealed entry copied to another organization does not open there.
    await ctl.redis.hset(
      ctl.keys.registryCredentials("rival"),
      HOST,
      (await ctl.redis.hget(ctl.keys.registryCredentials("acme"), HOST)) as string,
    );
    await expect(store.open("rival", HOST)).rejects.toThrow(/does not open with this platform's key/);
    await ctl.redis.hdel(ctl.keys.registryCredentials("rival"), HOST);
  });

  it("another organization sees none and removes none", async () => {
    expect((await call("rival", "GET", "")).body.data).toEqual([]);
    const removed = await call("rival", "DELETE", `/${HOST}`);
    expect(removed.status).toBe(404);
    expect(removed.body.error.code).toBe("registry_credential_not_found");
    expect((await call("acme", "GET", "")).body.data).toHaveLength(1);
  });

  it("bounds what it stores, naming the field", async () => {
    const long = await call("acme", "PUT", `/${HOST}`, { username: "team", password: "x".repeat(16 * 1024 + 1) });
    expect(long.status).toBe(400);
    expect(long.body.error.message).toMatch(/password.*at most 16384 bytes/);
    const host = await call("acme", "PUT", "/https:%2F%2Fevil", { username: "team", password: "p" });
    expect(host.status).toBe(400);
    expect(host.body.error.message).toMatch(/path parameter host: expected a registry host/);
    const user = await call("acme", "PUT", `/${HOST}`, { username: "a b", password: "p" });
    expect(user.status).toBe(400);
    expect(user.body.error.message).toMatch(/username/);
    const extra = await call("acme", "PUT", `/${HOST}`, { username: "team", password: "p", x: 1 });
    expect(extra.status).toBe(400);
    for (let i = 1; i < MAX_HOSTS_PER_ORG; i++)
      expect((await call("acme", "PUT", `/r${i}.test`, { username: "u", password: "p" })).status).toBe(201);
    const over = await call("acme", "PUT", "/one-too-many.test", { username: "u", password: "p" });
    expect(over.status).toBe(409);
    expect(over.body.error.code).toBe("registry_credential_limit_reached");
    for (let i = 1; i < MAX_HOSTS_PER_ORG; i++) await call("acme", "DELETE", `/r${i}.test`);
  });

  it("says which credential would pull a repository", async () => {
    const source = async (who: string, repository: string) =>
      (await call(who, "GET", `/source?repository=${encodeURIComponent(repository)}`)).body.source;
    expect(await source("acme-dev", `${HOST}/acme/items`)).toBe("organization");
    expect(await source("acme-dev", `${trustingHost}/acme/items`)).toBe("token_server");
    // A grant is only ever for the organization's own repositories.
    expect(await source("rival", `${trustingHost}/acme/items`)).toBe("none");
    expect(await source("rival", "operator.test:5000/rival/items")).toBe("operator");
    // The operator's credential serves an organization's own namespace only (PLATFORM_IMAGE_PULL_AUTH_SCOPE unset):
    // rival naming acme's repository on the operator's registry gets none.
    expect(await source("rival", "operator.test:5000/acme/items")).toBe("none");
    expect(await source("rival", `${HOST}/rival/items`)).toBe("none");
    const bad = await call("acme", "GET", "/source?repository=nope");
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toMatch(/^repository: expected host\/path/);
  });

  it("removes it", async () => {
    expect((await call("acme", "DELETE", `/${HOST}`)).body).toEqual({ deleted: true });
    expect((await call("acme", "GET", "")).body.data).toEqual([]);
    expect(everyAnswer.join("\n")).not.toContain(PASSWORD);
  });
});

describe("pulls", () => {
  const tokenAt = async (user: string, password: string, ...scopes: string[]) => {
    const query = new URLSearchParams([
      ["service", "trusting.test"] as [string, string],
      ...scopes.map((s): [string, string] => ["scope", s]),
    ]);
    const res = await fetch(`${gateway.url}/auth/registry-token?${query}`, {
      headers: { authorization: `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}` },
    });
    const body = (await res.json()) as { token?: string };
    const claims = body.token
      ? JSON.parse(Buffer.from(body.token.split(".")[1] as string, "base64url").toString())
      : {};
    return { status: res.status, claims, token: body.token };
  };

  it("a pull grant buys pull on its own repository only, and no more grants", async () => {
    const box = await SecretBox.load(settings.services);
    const resolver = new PullAuthResolver({
      credentials: new RegistryCredentials(ctl, async () => box),
      tokenKey: loadTokenKey(settings.registryToken.keyFile as string),
      issuer: settings.registryToken.issuer,
      registries: settings.registries,
    });
    const auth = await resolver.resolve("acme", `${trustingHost}/acme/items`);
    expect(auth).toMatchObject({ source: "token_server", username: "platform-pull-grant" });
    const grant = (auth as { password: string }).password;
    const got = await tokenAt(
      "platform-pull-grant",
      grant,
      "repository:acme/items:pull,push",
      "repository:acme/other:pull",
      "repository:rival/items:pull",
    );
    expect(got.status).toBe(200);
    expect(got.claims).toMatchObject({ aud: "trusting.test", sub: "acme/platform-pull-grant" });
    expect(got.claims.access).toEqual([
      { type: "repository", name: "acme/items", actions: ["pull"] },
      { type: "repository", name: "acme/other", actions: [] },
      { type: "repository", name: "rival/items", actions: [] },
    ]);
    // A registry token is no grant (its audience is the registry's), so none is renewed into another.
    expect((await tokenAt("platform-pull-grant", got.token as string, "repository:acme/items:pull")).status).toBe(401);
    // A grant altered, or signed by another key, is refused.
    const [h, c, s] = grant.split(".") as [string, string, string];
    const forged = JSON.parse(Buffer.from(c, "base64url").toString());
    forged.sub = "rival";
    const tampered = `${h}.${Buffer.from(JSON.stringify(forged)).toString("base64url")}.${s}`;
    expect((await tokenAt("platform-pull-grant", tampered, "repository:rival/items:pull")).status).toBe(401);
    const other = mintPullGrant({
      key: generateKeyPairSync("ec", { namedCurve: "prime256v1" }).privateKey,
      issuer: settings.registryToken.issuer,
      org: "acme",
      repositories: ["acme/items"],
      ttlMs: 60_000,
    });
    expect((await tokenAt("platform-pull-grant", other.token, "repository:acme/items:pull")).status).toBe(401);
    // The organization's own credential comes first; without either, the operator's file.
    await new RegistryCredentials(ctl, async () => box).set("acme", trustingHost, "team", PASSWORD, {
      id: "k",
      name: "n",
    });
    expect(await resolver.resolve("acme", `${trustingHost}/acme/items`)).toEqual({
      source: "organization",
      host: trustingHost,
      username: "team",
      password: PASSWORD,
    });
    expect(await resolver.resolve("rival", `${trustingHost}/acme/items`)).toEqual({ source: "none" });
  });

  it("writes the credential to a private auth file for the one pull, removed after", async () => {
    let seen: { file: string; mode: number; dirMode: number; text: string } | undefined;
    await withAuthFile({ source: "organization", host: HOST, username: "team", password: PASSWORD }, async (file) => {
      if (!file) throw new Error("no auth file");
      seen = {
        file,
        mode: statSync(file).mode & 0o777,
        dirMode: statSync(dirname(file)).mode & 0o777,
        text: await readFile(file, "utf8"),
      };
    });
    expect(seen).toMatchObject({ mode: 0o600, dirMode: 0o700 });
    expect(JSON.parse(seen?.text ?? "{}").auths[HOST].auth).toBe(Buffer.from(`team:${PASSWORD}`).toString("base64"));
    expect(existsSync(dirname(seen?.file ?? "/nonexistent"))).toBe(false);
    await withAuthFile({ source: "operator", authFile: "/op/auth.json" }, async (file) =>
      expect(file).toBe("/op/auth.json"),
    );
  });
});
