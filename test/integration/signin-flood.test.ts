/**
 * Anonymous callers of the sign-in (docs/security.md, "Anonymous callers"): a real flood from one
 * loopback address against a real gateway and Redis. Viewing the device page allocates nothing, so
 * 10,000 page views leave no sign-in open; opening sign-ins (device codes, browser flows) is
 * bounded per client address, so one address's flood cannot refuse another address's sign-in.
 * Clients are told apart by the loopback address their socket is bound to (127.0.0.1, .2, .3:
 * every 127/8 address is this machine's own).
 */
import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { randomSecret } from "../../src/signin/oauth.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { privateRedis } from "../helpers/redis.ts";

let redis: Awaited<ReturnType<typeof privateRedis>>;
let ctl: Control;
let gateway: RunningGateway;

type Answer = { status: number; body: string; cookies: string[] };

/** One request from the client address `from`. */
function send(from: string, method: string, path: string, body?: string, cookie?: string): Promise<Answer> {
  const url = new URL(path, gateway.url);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname + url.search,
        method,
        localAddress: from,
        agent: false,
        headers: {
          ...(body === undefined ? {} : { "content-type": "application/x-www-form-urlencoded" }),
          ...(cookie ? { cookie } : {}),
        },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (d) => (text += d));
        res.on("end", () =>
          resolve({ status: res.statusCode ?? 0, body: text, cookies: [res.headers["set-cookie"] ?? []].flat() }),
        );
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

/** `n` requests from `from`, `parallel` at a time; the statuses seen, counted. */
async function flood(n: number, parallel: number, one: () => Promise<Answer>): Promise<Map<number, number>> {
  const seen = new Map<number, number>();
  let left = n;
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (left-- > 0) {
        const { status } = await one();
        seen.set(status, (seen.get(status) ?? 0) + 1);
      }
    }),
  );
  return seen;
}

const openSignins = () => ctl.redis.zcard(ctl.keys.signinOpen);
const deviceCode = (from: string) => send(from, "POST", "/auth/device/code", "client_id=platform-cli");

beforeAll(async () => {
  redis = await privateRedis();
  const settings = { ...loadSettings({}), redisUrl: redis.url };
  ctl = connectControl(redis.url, settings.prefix);
  gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });
});

afterAll(async () => {
  await gateway?.close();
  await ctl?.redis.quit();
  await redis?.stop();
});

describe("anonymous sign-in floods", () => {
  it("10,000 views of the device page open no sign-in; another client's device code is still given", {
    timeout: 120_000,
  }, async () => {
    const seen = await flood(10_000, 32, () => send("127.0.0.1", "GET", "/auth/device"));
    expect([...seen.entries()]).toEqual([[200, 10_000]]);
    expect(await openSignins()).toBe(0);
    const other = await deviceCode("127.0.0.2");
    expect(other.status, other.body).toBe(200);
    expect(JSON.parse(other.body)).toMatchObject({ user_code: expect.stringMatching(/^[A-Z]{4}-[A-Z]{4}$/) });
  });

  it("a flood of device codes and browser flows from one address is cut at its share; another address still signs in", {
    timeout: 120_000,
  }, async () => {
    const perMinute = loadSettings({}).signin.opensPerMinute;
    const before = await openSignins();
    const codes = await flood(2_000, 32, () => deviceCode("127.0.0.3"));
    const authorize = `/auth/authorize?${new URLSearchParams({
      client_id: "platform-cli",
      redirect_uri: "http://127.0.0.1:40000/callback",
      response_type: "code",
      state: randomSecret(),
      code_challenge_method: "S256",
      code_challenge: randomSecret(),
    })}`;
    const flows = await flood(2_000, 32, () => send("127.0.0.3", "GET", authorize));
    // The address's share is taken (within one minute, or two where the flood crossed a minute's end).
    const given = (codes.get(200) ?? 0) + (flows.get(303) ?? 0);
    expect(given).toBeGreaterThanOrEqual(perMinute);
    expect(given).toBeLessThanOrEqual(2 * perMinute);
    expect((codes.get(429) ?? 0) + (flows.get(429) ?? 0)).toBe(4_000 - given);
    expect((await openSignins()) - before).toBe(given);
    // Another client is not refused.
    const other = await deviceCode("127.0.0.4");
    expect(other.status, other.body).toBe(200);
    const page = await send("127.0.0.4", "GET", authorize);
    expect(page.status).toBe(303);
  });

  it("a device flow is opened only for a code that names a waiting device, from the page's own form", async () => {
    const started = JSON.parse((await deviceCode("127.0.0.5")).body) as { user_code: string };
    const view = await send("127.0.0.5", "GET", "/auth/device");
    const cookie = (view.cookies.find((c) => c.startsWith("platform_device=")) ?? "").split(";")[0] as string;
    const csrf = (/name="csrf" value="([^"]+)"/.exec(view.body) ?? [])[1] as string;
    expect(csrf).toBeTruthy();
    const before = await openSignins();
    // A forged post (no cookie) and a wrong code open nothing.
    const forged = await send("127.0.0.5", "POST", "/auth/device", `csrf=${csrf}&user_code=${started.user_code}`);
    expect(forged.status).toBe(403);
    const wrong = await send("127.0.0.5", "POST", "/auth/device", `csrf=${csrf}&user_code=BBBB-BBBB`, cookie);
    expect(wrong.status).toBe(400);
    expect(await openSignins()).toBe(before);
    const right = await send(
      "127.0.0.5",
      "POST",
      "/auth/device",
      `csrf=${csrf}&user_code=${started.user_code}`,
      cookie,
    );
    expect(right.status).toBe(303);
    expect(right.cookies.some((c) => c.startsWith("platform_signin="))).toBe(true);
    expect(await openSignins()).toBe(before + 1);
  });
});
