/**
 * src/redis/subscription.ts on a real Redis: messages are heard again after the subscriber connection
 * is cut, and closing it while it reconnects leaves no rejection unhandled (ioredis's own
 * resubscription did: a gateway stopping just after Redis dropped its subscribers).
 */
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { subscribe } from "../../src/redis/subscription.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

let redis: PrivateRedis;
let ctl: Control;

beforeAll(async () => {
  redis = await privateRedis();
  ctl = connectControl(redis.url, "subscription-test");
});

afterAll(async () => {
  await ctl?.redis.quit().catch(() => undefined);
  await redis?.stop();
});

describe("a subscription", () => {
  it("says when it lost the connection and when it listens again, and hears messages after", async () => {
    const heard: string[] = [];
    const events: string[] = [];
    const subscription = await subscribe(ctl, ["news"], (channel, message) => heard.push(`${channel}:${message}`), {
      onLost: () => events.push("lost"),
      onListening: () => events.push("listening"),
    });
    try {
      expect(events).toEqual(["listening"]);
      await ctl.redis.publish("news", "one");
      await vi.waitFor(() => expect(heard).toEqual(["news:one"]));
      expect(await ctl.redis.client("KILL", "TYPE", "pubsub")).toBe(1);
      await vi.waitFor(() => expect(events.slice(-2)).toEqual(["lost", "listening"]), { timeout: 10_000 });
      await ctl.redis.publish("news", "two");
      await vi.waitFor(() => expect(heard).toEqual(["news:one", "news:two"]));
    } finally {
      await subscription.close();
    }
  });

  it("closed while reconnecting, leaves no rejection unhandled", async () => {
    const unhandled: unknown[] = [];
    const record = (reason: unknown) => unhandled.push(reason);
    process.on("unhandledRejection", record);
    // The moment that broke ioredis's own resubscription: closed while the reconnect's ready check
    // (INFO) is in flight, the QUIT goes out first and the resubscribe, sent on the answer, is rejected.
    let onReadyCheck: (() => void) | undefined;
    // Patched by hand: a vi.spyOn would itself handle the promises it sees returned.
    const send = Redis.prototype.sendCommand;
    Redis.prototype.sendCommand = function (this: Redis, ...args: Parameters<typeof send>) {
      const sent = send.apply(this, args);
      if (args[0].name === "info" && this !== ctl.redis && onReadyCheck) {
        onReadyCheck();
        onReadyCheck = undefined;
      }
      return sent;
    };
    try {
      for (let i = 0; i < 5; i++) {
        const subscription = await subscribe(ctl, ["news"], () => undefined);
        const closed = new Promise<void>((resolve) => {
          onReadyCheck = () => void subscription.close().then(resolve);
        });
        await ctl.redis.client("KILL", "TYPE", "pubsub");
        await closed;
      }
      // Node reports a rejection left unhandled once the turn that left it is over.
      await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).toEqual([]);
    } finally {
      Redis.prototype.sendCommand = send;
      process.off("unhandledRejection", record);
    }
  });
});
