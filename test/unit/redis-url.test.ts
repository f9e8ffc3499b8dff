/** REDIS_URL with credentials and TLS, masking, and reading reply-stream entries defensively. */
import { describe, expect, it } from "vitest";
import { decodeReplyEntry, encodeReplyEntry } from "../../src/queue/replies.ts";
import { maskRedisUrl, redisOptionsFromUrl } from "../../src/control/redis.ts";

describe("REDIS_URL", () => {
  it("takes a URL-encoded user and password", () => {
    const o = redisOptionsFromUrl("redis://team%3Aa:p%40ss%2Fw0rd@redis.internal:6380/2");
    expect(o).toMatchObject({ host: "redis.internal", port: 6380, username: "team:a", password: "p@ss/w0rd", db: 2 });
    expect(o.tls).toBeUndefined();
  });

  it("takes a password without a user (requirepass)", () => {
    expect(redisOptionsFromUrl("redis://:secret@127.0.0.1:6379")).toMatchObject({ username: undefined, password: "secret", db: 0 });
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
    expect(decodeReplyEntry(["job", "j1", "e", "{not json"])).toEqual({ problem: expect.stringMatching(/not valid JSON/) });
    expect(decodeReplyEntry(["job", "j1"])).toEqual({ problem: expect.stringMatching(/missing/) });
    expect(decodeReplyEntry(["garbage"])).toEqual({ problem: expect.stringMatching(/missing/) });
    expect(decodeReplyEntry(["job", "j1", "e", '{"type":"bogus"}'])).toEqual({ problem: expect.stringMatching(/not a known event/) });
  });
});
