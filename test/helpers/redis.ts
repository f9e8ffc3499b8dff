/** A private Redis per suite: the same embedded server `platform up` starts, in a temp dir. */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startEmbeddedRedis } from "../../src/control/embedded-redis.ts";

export async function privateRedis(): Promise<{ url: string; stop: () => Promise<void> }> {
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
