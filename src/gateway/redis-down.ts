/**
 * While the gateway's Redis is away (a restart under `platform up`, a failover), every request is
 * answered within seconds: 503 `queue_unavailable` with Retry-After, at once when Redis is already
 * down, and after REDIS_WAIT_MS for a request that was waiting on Redis when it went away. A
 * streamed answer already under way is ended by the dispatcher instead (src/queue/dispatcher.ts).
 */
import type { MiddlewareHandler } from "hono";
import type { RedisClient } from "../redis/connection.ts";
import { outageOf, redisUnavailable } from "../redis/outage.ts";
import { REDIS_WAIT_MS } from "../redis/wait.ts";

export function redisDown(redis: RedisClient): MiddlewareHandler {
  const outage = outageOf(redis);
  return async (_c, next) => {
    if (outage.down) throw redisUnavailable(`Redis is not connected (connection ${redis.status})`);
    let unsubscribe = () => undefined as unknown;
    const lasted = new Promise<never>((_, reject) => {
      unsubscribe = outage.onLasting(() =>
        reject(redisUnavailable(`Redis did not answer within ${REDIS_WAIT_MS} ms (connection ${redis.status})`)),
      );
    });
    const handled = next();
    // The handler keeps running if the outage wins; whatever it ends with then is not the answer.
    handled.catch(() => undefined);
    try {
      await Promise.race([handled, lasted]);
    } finally {
      unsubscribe();
    }
  };
}
