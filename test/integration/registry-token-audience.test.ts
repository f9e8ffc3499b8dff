/**
 * The registry token server and the pull grant's audience (docs/security.md, "Anonymous
 * callers"): a tenant asking for a token whose `service` is the grant audience would get a token
 * the grant check accepts, a pull grant of its own making (renewable past its key's revocation).
 * Refused with a 400; a token for a real registry is no grant either. A real gateway and Redis.
 */
import { generateKeyPairSync } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { createOrg } from "../../src/orgs/store.ts";
import { GRANT_AUDIENCE, GRANT_USERNAME } from "../../src/registry-credentials/grant.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { privateRedis } from "../helpers/redis.ts";

let redis: Awaited<ReturnType<typeof privateRedis>>;
let ctl: Control;
let gateway: RunningGateway;
let dir: string;
let key: string;

async function tokenAt(user: string, password: string, service: string, scope: string) {
  const query = new URLSearchParams({ service, scope });
  const res = await fetch(`${gateway.url}/auth/registry-token?${query}`, {
    headers: { authorization: `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}` },
  });
  const body = (await res.json()) as { token?: string; error?: { message: string; param: string } };
  return { status: res.status, body };
}

beforeAll(async () => {
  redis = await privateRedis();
  dir = await mkdtemp(join(tmpdir(), "registry-token-audience-"));
  const keyFile = join(dir, "token.key");
  const { privateKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
  await writeFile(keyFile, privateKey.export({ type: "sec1", format: "pem" }), { mode: 0o600 });
  const settings = {
    ...loadSettings({ PLATFORM_DATA_DIR: dir, PLATFORM_REGISTRY_TOKEN_KEY: keyFile }),
    redisUrl: redis.url,
  };
  ctl = connectControl(redis.url, settings.prefix);
  await createOrg(ctl, "beta");
  key = (await createApiKey(ctl, "dev", "user", undefined, "beta")).key;
  gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });
});

afterAll(async () => {
  await gateway?.close();
  await ctl?.redis.quit();
  await redis?.stop();
  await rm(dir, { recursive: true, force: true });
});

describe("the pull grant's audience", () => {
  it("is refused as a registry's service: no tenant mints itself a grant", async () => {
    const asked = await tokenAt("beta", key, GRANT_AUDIENCE, "repository:beta/dev/app:pull,push");
    expect(asked.status).toBe(400);
    expect(asked.body.error).toMatchObject({ param: "service" });
    expect(asked.body.token).toBeUndefined();
    // The same spelled in another case, too.
    expect((await tokenAt("beta", key, GRANT_AUDIENCE.toUpperCase(), "repository:beta/app:pull")).status).toBe(400);
  });

  it("a token for a real registry is no grant", async () => {
    const real = await tokenAt("beta", key, "registry.test", "repository:beta/app:pull");
    expect(real.status).toBe(200);
    const renewed = await tokenAt(
      GRANT_USERNAME,
      real.body.token as string,
      "registry.test",
      "repository:beta/app:pull",
    );
    expect(renewed.status).toBe(401);
  });
});
