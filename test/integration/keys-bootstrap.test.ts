/**
 * API keys at rest and the first-admin bootstrap, against a real Redis: Redis
 * holds only SHA-256 hashes, `platform keys bootstrap` is idempotent and refuses
 * weak or competing keys, the gateway role bootstraps at start, and the CLI's
 * credentials file is private.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { chmod, mkdtemp, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKey, verifyApiKey, weakKeyReason } from "../../src/keys/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { credentialsPath, writeCredentials } from "../../src/client/credentials.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const BIN = join(import.meta.dirname, "..", "..", "bin", "platform.js");
const run = promisify(execFile);
const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

let redis: PrivateRedis;
let ctl: Control;
const children: ChildProcess[] = [];

beforeAll(async () => {
  redis = await privateRedis();
  ctl = connectControl(redis.url, "boot");
});

afterAll(async () => {
  for (const child of children) child.kill("SIGKILL");
  await ctl?.redis.quit();
  await redis?.stop();
});

/** Every byte Redis holds under the prefix, whatever the key type. */
async function everything(): Promise<string> {
  const parts: string[] = [];
  for (const key of await ctl.redis.keys("boot:*")) {
    const type = await ctl.redis.type(key);
    if (type === "string") parts.push((await ctl.redis.get(key)) ?? "");
    if (type === "hash") parts.push(JSON.stringify(await ctl.redis.hgetall(key)));
    if (type === "set") parts.push(JSON.stringify(await ctl.redis.smembers(key)));
    if (type === "list") parts.push(JSON.stringify(await ctl.redis.lrange(key, 0, -1)));
    if (type === "zset") parts.push(JSON.stringify(await ctl.redis.zrange(key, 0, -1)));
    parts.push(key);
  }
  return parts.join("\n");
}

function cli(args: string[], env: Record<string, string | undefined>) {
  const base = {
    ...process.env,
    REDIS_URL: redis.url,
    PLATFORM_PREFIX: "boot",
    PLATFORM_BOOTSTRAP_ADMIN_KEY: undefined,
  };
  return run(process.execPath, [BIN, ...args], { env: { ...base, ...env } }).then(
    (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
    (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }),
  );
}

describe("API keys at rest", () => {
  it("Redis holds only the key's SHA-256, never the key", async () => {
    const { key, record } = await createApiKey(ctl, "probe", "user");
    expect(record.hash).toBe(sha256(key));
    const stored = await everything();
    expect(stored).toContain(sha256(key));
    expect(stored).not.toContain(key);
    expect(stored).not.toContain(key.slice(-20));
    expect((await verifyApiKey(ctl, key))?.id).toBe(record.id);
  });

  it("the CLI's credentials file is 0600 in a 0700 directory, even when it existed with a looser mode", async () => {
    const dir = join(await mkdtemp(join(tmpdir(), "platform-creds-")), "config");
    const previous = process.env.PLATFORM_CONFIG_DIR;
    process.env.PLATFORM_CONFIG_DIR = dir;
    try {
      const path = await writeCredentials({ base_url: "http://127.0.0.1:8000", api_key: "sk-plat-test" });
      expect(path).toBe(credentialsPath());
      expect((await stat(path)).mode & 0o777).toBe(0o600);
      expect((await stat(dir)).mode & 0o777).toBe(0o700);
      await chmod(path, 0o644);
      await writeCredentials({ base_url: "http://127.0.0.1:8000", api_key: "sk-plat-test2" });
      expect((await stat(path)).mode & 0o777).toBe(0o600);
    } finally {
      if (previous === undefined) delete process.env.PLATFORM_CONFIG_DIR;
      else process.env.PLATFORM_CONFIG_DIR = previous;
    }
  });
});

describe("platform keys bootstrap", () => {
  it("--generate prints one strong key and stores nothing", async () => {
    const before = await ctl.redis.hlen(ctl.keys.apiKeys);
    const r = await cli(["keys", "bootstrap", "--generate"], {});
    expect(r.code).toBe(0);
    const key = r.stdout.trim();
    expect(weakKeyReason(key)).toBeUndefined();
    expect(await ctl.redis.hlen(ctl.keys.apiKeys)).toBe(before);
    expect((await cli(["keys", "bootstrap", "--generate"], {})).stdout.trim()).not.toBe(key);
  });

  it("refuses weak keys (exit 2, naming the problem) and a missing key or REDIS_URL", async () => {
    for (const weak of [
      "short-key",
      "a".repeat(64),
      "abcdabcdabcdabcdabcdabcdabcdabcdabcd",
      "0123456701234567012345670123456701",
      "has space in it 0123456789abcdefghij",
    ]) {
      expect(weakKeyReason(weak), weak).toBeDefined();
    }
    for (const strong of ["9f86d081884c7d659a2feaa0c55ad015", "sk-plat-3q2-7wEJ_1nN0yVtQ8bS4xZrLk5mHcPaG6dUoYiTf9ue"])
      expect(weakKeyReason(strong), strong).toBeUndefined();
    const r = await cli(["keys", "bootstrap"], { PLATFORM_BOOTSTRAP_ADMIN_KEY: "short-key" });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/too weak: it is 9 characters long; use at least 32/);
    expect((await cli(["keys", "bootstrap"], {})).stderr).toContain("PLATFORM_BOOTSTRAP_ADMIN_KEY");
    expect((await cli(["keys", "bootstrap"], {})).code).toBe(2);
    const noRedis = await cli(["keys", "bootstrap"], {
      REDIS_URL: undefined,
      PLATFORM_BOOTSTRAP_ADMIN_KEY: "9f86d081884c7d659a2feaa0c55ad015",
    });
    expect(noRedis.code).toBe(2);
    expect(noRedis.stderr).toContain("REDIS_URL");
    expect(await ctl.redis.exists(ctl.keys.bootstrapKey)).toBe(0);
  });

  it("stores only the hash, is idempotent, refuses a different key while the first is valid, and works from a file", async () => {
    const key = (await cli(["keys", "bootstrap", "--generate"], {})).stdout.trim();
    const first = await cli(["keys", "bootstrap"], { PLATFORM_BOOTSTRAP_ADMIN_KEY: key });
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toContain("registered as key_");
    expect(first.stdout + first.stderr).not.toContain(key);
    const id = /registered as (key_[0-9a-f]+)/.exec(first.stdout)![1]!;
    const stored = await everything();
    expect(stored).toContain(sha256(key));
    expect(stored).not.toContain(key);
    expect(await verifyApiKey(ctl, key)).toMatchObject({ id, role: "admin", name: "bootstrap-admin" });

    // Again, and again from a mounted Secret file: nothing new is minted or printed.
    const keysBefore = await ctl.redis.hlen(ctl.keys.apiKeys);
    const again = await cli(["keys", "bootstrap"], { PLATFORM_BOOTSTRAP_ADMIN_KEY: key });
    expect(again.code).toBe(0);
    expect(again.stdout).toContain(`already registered (${id})`);
    const file = join(await mkdtemp(join(tmpdir(), "platform-secret-")), "admin-key");
    await writeFile(file, `${key}\n`);
    const fromFile = await cli(["keys", "bootstrap", "--from-file", file, "--json"], {});
    expect(JSON.parse(fromFile.stdout)).toEqual({ outcome: "exists", id, name: "bootstrap-admin", role: "admin" });
    expect(await ctl.redis.hlen(ctl.keys.apiKeys)).toBe(keysBefore);

    // A different key while the first is still valid: refused, exit 1, nothing added.
    const other = (await cli(["keys", "bootstrap", "--generate"], {})).stdout.trim();
    const refused = await cli(["keys", "bootstrap"], { PLATFORM_BOOTSTRAP_ADMIN_KEY: other });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`a different bootstrap admin key (${id}) is already registered`);
    expect(refused.stderr).toContain(`platform keys revoke ${id}`);
    expect(await verifyApiKey(ctl, other)).toBeUndefined();
    expect(await ctl.redis.hlen(ctl.keys.apiKeys)).toBe(keysBefore);
  });

  it("the gateway role without REDIS_URL exits 2 at once, naming REDIS_URL, even with a password and an admin key set", async () => {
    const key = (await cli(["keys", "bootstrap", "--generate"], {})).stdout.trim();
    for (const env of [{}, { REDIS_PASSWORD: "a-password-without-a-url", PLATFORM_BOOTSTRAP_ADMIN_KEY: key }]) {
      // A timeout, so a gateway that tried to start anyway (and hung on a Redis it cannot reach) fails the test.
      const r = await run(process.execPath, [BIN, "gateway", "--host", "127.0.0.1", "--port", "0"], {
        env: {
          ...process.env,
          REDIS_URL: undefined,
          REDIS_PASSWORD: undefined,
          PLATFORM_PREFIX: "noredis",
          PLATFORM_BOOTSTRAP_ADMIN_KEY: undefined,
          ...env,
        },
        timeout: 20_000,
      }).then(
        (ok) => ({ code: 0 as number | null, signal: null as string | null, stdout: ok.stdout, stderr: ok.stderr }),
        (e: { code: number | null; signal: string | null; stdout: string; stderr: string }) => e,
      );
      expect(r.signal, JSON.stringify(env)).toBeNull();
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toContain("error: REDIS_URL is not set; the gateway needs the platform's Redis");
      expect(r.stdout).not.toContain("gateway listening");
      expect(r.stdout + r.stderr).not.toContain(key);
    }
  });

  it("the gateway role bootstraps at every start, and the key then manages the platform", async () => {
    const prefix = "gwboot";
    const key = (await cli(["keys", "bootstrap", "--generate"], {})).stdout.trim();
    const start = () =>
      new Promise<{ child: ChildProcess; url: string; out: string }>((resolve, reject) => {
        const child = spawn(process.execPath, [BIN, "gateway", "--host", "127.0.0.1", "--port", "0"], {
          env: {
            ...process.env,
            REDIS_URL: redis.url,
            PLATFORM_PREFIX: prefix,
            PLATFORM_BOOTSTRAP_ADMIN_KEY: key,
            PLATFORM_DATA_DIR: join(tmpdir(), `gw-${process.pid}`),
          },
          stdio: ["ignore", "pipe", "pipe"],
        });
        children.push(child);
        let out = "";
        child.stdout!.on("data", (d: Buffer) => {
          out += d.toString();
          // The gateway role logs JSON lines by default: the URL ends at the closing quote.
          const m = /gateway listening on (https?:\/\/[^\s";]+)/.exec(out);
          if (m) resolve({ child, url: m[1]!, out });
        });
        child.stderr!.on("data", (d: Buffer) => (out += d.toString()));
        child.once("exit", (code) => reject(new Error(`gateway exited ${code}: ${out}`)));
      });
    const stop = (child: ChildProcess) =>
      new Promise<void>((r) => {
        child.once("exit", () => r());
        child.kill("SIGTERM");
      });

    const one = await start();
    expect(one.out).toContain("bootstrap admin key registered");
    expect(one.out).not.toContain(key);
    const res = await fetch(`${one.url}/admin/v1/keys`, { headers: { authorization: `Bearer ${key}` } });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { data: { name: string }[] }).data.map((k) => k.name)).toEqual(["bootstrap-admin"]);
    await stop(one.child);

    const two = await start();
    expect(two.out).toContain("already registered");
    const gw = connectControl(redis.url, prefix);
    expect(await gw.redis.hlen(gw.keys.apiKeys)).toBe(1);
    gw.redis.disconnect();
    await stop(two.child);
  });
});
