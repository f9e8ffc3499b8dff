/** A private Redis per suite (the same embedded server `platform up` starts, in a temp dir), and what tests that run their own Redis servers share. */
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Redis } from "ioredis";
import { startEmbeddedRedis } from "../../src/redis/embedded.ts";

export interface PrivateRedis {
  url: string;
  stop: () => Promise<void>;
}

export async function privateRedis(): Promise<PrivateRedis> {
  const dir = await mkdtemp(join(tmpdir(), "platform-redis-"));
  const redis = await startEmbeddedRedis(dir);
  return {
    url: redis.url,
    stop: async () => {
      await redis.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Probes fail while a server starts or after it is killed: that is expected, not news. */
export function quiet(redis: Redis): Redis {
  redis.on("error", () => undefined);
  return redis;
}

/** A loopback port nothing listens on right now. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as { port: number }).port;
      server.close(() => resolve(port));
    });
  });
}

/** Whether `port` on loopback can be listened on right now. */
export async function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}
