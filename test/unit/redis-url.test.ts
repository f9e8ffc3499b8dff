/** REDIS_URL with credentials and TLS (one Redis, Sentinel, Cluster), masking, and reading reply-stream entries defensively. */
import { describe, expect, it } from "vitest";
import { decodeReplyEntry, encodeReplyEntry } from "../../src/queue/replies.ts";
import { maskRedisUrl, redisOptionsFromUrl } from "../../src/redis/connection.ts";
import { loadSettings } from "../../src/settings/index.ts";

describe("REDIS_URL", () => {
  it("takes a URL-encoded user and password", () => {
    const o = redisOptionsFromUrl("redis://team%3Aa:p%40ss%2Fw0rd@redis.internal:6380/2");
    expect(o).toMatchObject({ host: "redis.internal", port: 6380, username: "team:a", password: "p@ss/w0rd", db: 2 });
    expect(o.tls).toBeUndefined();
  });

  it("takes a password without a user (requirepass)", () => {
    expect(redisOptionsFromUrl("redis://:secret@127.0.0.1:6379")).toMatchObject({
      username: undefined,
      password: "secret",
      db: 0,
    });
  });

  it("turns TLS on for rediss://", () => {
    const o = redisOptionsFromUrl("rediss://platform:pw@redis.example.com");
    expect(o.tls).toEqual({});
    expect(o).toMatchObject({ host: "redis.example.com", port: 6379, username: "platform", password: "pw" });
  });

  it("rejects other schemes and bad databases without echoing the password", () => {
    expect(() => redisOptionsFromUrl("http://u:topsecret@h:1")).toThrow(/expected redis:\/\//);
    expect(() => redisOptionsFromUrl("http://u:topsecret@h:1")).not.toThrow(/topsecret/);
    expect(() => redisOptionsFromUrl("redis://u:topsecret@h:1/x")).toThrow(/database number/);
    expect(() => redisOptionsFromUrl("redis://u:topsecret@h:1/x")).not.toThrow(/topsecret/);
  });

  it("masks the password wherever a URL is shown", () => {
    expect(maskRedisUrl("redis://platform:abc123@127.0.0.1:4000")).toBe("redis://platform:***@127.0.0.1:4000");
    expect(maskRedisUrl("rediss://:abc123@h:4000/3")).toBe("rediss://:***@h:4000/3");
    expect(maskRedisUrl("redis://127.0.0.1:6379")).toBe("redis://127.0.0.1:6379");
    expect(maskRedisUrl("not a url:abc123@x")).not.toContain("abc123");
    expect(maskRedisUrl("redis+sentinel://:abc123@s1:26379,s2:26379/primary?sentinel_password=def456")).toBe(
      "redis+sentinel://:***@s1:26379,s2:26379/primary?sentinel_password=***",
    );
  });

  it("joins REDIS_PASSWORD to a URL without one (plain or Sentinel), and refuses a REDIS_URL it cannot use", () => {
    expect(loadSettings({ REDIS_URL: "redis://r.internal:6379", REDIS_PASSWORD: "p@ss/w" }).redisUrl).toBe(
      "redis://:p%40ss%2Fw@r.internal:6379",
    );
    expect(loadSettings({ REDIS_URL: "redis://platform@r:6379/2", REDIS_PASSWORD: "pw" }).redisUrl).toBe(
      "redis://platform:pw@r:6379/2",
    );
    expect(loadSettings({ REDIS_URL: "redis://:own@r:6379", REDIS_PASSWORD: "other" }).redisUrl).toBe(
      "redis://:own@r:6379",
    );
    const sentinel = loadSettings({ REDIS_URL: "redis+sentinel://s1:26379,s2:26379/primary", REDIS_PASSWORD: "pw" })
      .redisUrl as string;
    expect(redisOptionsFromUrl(sentinel)).toMatchObject({
      password: "pw",
      name: "primary",
      sentinels: [{ host: "s1" }, { host: "s2" }],
    });
    expect(() => loadSettings({ REDIS_URL: "http://u:topsecret@h:1" })).toThrow(/REDIS_URL/);
    expect(() => loadSettings({ REDIS_URL: "http://u:topsecret@h:1" })).not.toThrow(/topsecret/);
  });

  it("reads a Sentinel group: every sentinel, the group name, credentials, database and TLS", () => {
    const o = redisOptionsFromUrl(
      "redis+sentinel://team:p%40ss@10.0.0.1:26379,sentinel-b,[::1]:26380/my%2Dprimary/3?sentinel_password=s%26cret",
    );
    expect(o).toMatchObject({
      sentinels: [
        { host: "10.0.0.1", port: 26379 },
        { host: "sentinel-b", port: 26379 },
        { host: "::1", port: 26380 },
      ],
      name: "my-primary",
      username: "team",
      password: "p@ss",
      sentinelPassword: "s&cret",
      db: 3,
      tls: undefined,
      enableTLSForSentinelMode: false,
      failoverDetector: true,
      maxRetriesPerRequest: null,
    });
    expect(redisOptionsFromUrl("rediss+sentinel://s1:26379/g")).toMatchObject({
      tls: {},
      enableTLSForSentinelMode: true,
      db: 0,
      password: undefined,
    });
    expect(() => redisOptionsFromUrl("redis+sentinel://:topsecret@s1:99999/g")).toThrow(/not a sentinel address/);
    expect(() => redisOptionsFromUrl("redis+sentinel://:topsecret@s1:99999/g")).not.toThrow(/topsecret/);
    expect(() => redisOptionsFromUrl("redis+sentinel://:topsecret@s1/g/x")).toThrow(/database number/);
    // No group: not a Sentinel URL, and not a redis:// one either.
    expect(() => redisOptionsFromUrl("redis+sentinel://s1:26379")).toThrow(/Sentinel/);
  });
});

describe("REDIS_URL naming a Redis Cluster", () => {
  it("lists the startup nodes and carries credentials and TLS to every node connection", () => {
    expect(redisOptionsFromUrl("redis+cluster://team:p%40ss@10.0.0.1:7000,node-b,[::1]:7002")).toMatchObject({
      clusterNodes: [
        { host: "10.0.0.1", port: 7000 },
        { host: "node-b", port: 6379 },
        { host: "::1", port: 7002 },
      ],
      username: "team",
      password: "p@ss",
      tls: undefined,
      maxRetriesPerRequest: null,
    });
    expect(redisOptionsFromUrl("rediss+cluster://c1:7000/")).toMatchObject({
      clusterNodes: [{ host: "c1", port: 7000 }],
      tls: {},
      password: undefined,
    });
    expect(redisOptionsFromUrl("redis://h:1").clusterNodes).toBeUndefined();
  });

  it("refuses a database other than 0 and bad addresses, without echoing the password; REDIS_PASSWORD joins it", () => {
    expect(() => redisOptionsFromUrl("redis+cluster://:topsecret@c1:7000/2")).toThrow(/database 0 only/);
    expect(() => redisOptionsFromUrl("redis+cluster://:topsecret@c1:7000,c2:99999")).toThrow(
      /not a cluster node address/,
    );
    expect(() => redisOptionsFromUrl("redis+cluster://:topsecret@c1:7000,c2:99999")).not.toThrow(/topsecret/);
    expect(maskRedisUrl("redis+cluster://:abc123@c1:7000,c2:7001")).toBe("redis+cluster://:***@c1:7000,c2:7001");
    const url = loadSettings({ REDIS_URL: "redis+cluster://c1:7000,c2:7001", REDIS_PASSWORD: "pw" }).redisUrl as string;
    expect(redisOptionsFromUrl(url)).toMatchObject({ password: "pw", clusterNodes: [{ host: "c1" }, { host: "c2" }] });
  });
});

describe("reply stream entries", () => {
  it("reads fields by name, in any order", () => {
    const event = JSON.stringify({ type: "token", text: "hi" });
    expect(decodeReplyEntry(["e", event, "job", "j1"])).toEqual({ jobId: "j1", event: { type: "token", text: "hi" } });
  });

  it("reads back what a worker writes", () => {
    const event = { type: "started", replica: "r1", attempt: 1 } as const;
    expect(decodeReplyEntry(encodeReplyEntry("j1", event))).toEqual({ jobId: "j1", event });
  });

  it("reports, rather than throws on, entries it cannot use", () => {
    expect(decodeReplyEntry(["job", "j1", "e", "{not json"])).toEqual({
      problem: expect.stringMatching(/not valid JSON/),
    });
    expect(decodeReplyEntry(["job", "j1"])).toEqual({ problem: expect.stringMatching(/missing/) });
    expect(decodeReplyEntry(["garbage"])).toEqual({ problem: expect.stringMatching(/missing/) });
    expect(decodeReplyEntry(["job", "j1", "e", '{"type":"bogus"}'])).toEqual({
      problem: expect.stringMatching(/not a known event/),
    });
  });
});
