/**
 * Whether a Redis connection is away, and for how long: what lets the gateway answer 503 at once
 * while Redis is down instead of queueing the request's commands until it returns. ioredis holds
 * commands while it reconnects and never fails them (BullMQ needs that), so the state is read
 * from the connection's events rather than from failed commands.
 */
import { PlatformError, withDetail } from "../contracts/errors.ts";
import { REDIS_WAIT_MS } from "./wait.ts";

/** An embedded Redis is back within a second or two of dying; a failover takes a few more. */
export const REDIS_DOWN_RETRY_AFTER_S = 2;

/** What a request hears while Redis is away: 503 with Retry-After, as any overload (the code the queue's other Redis failures use). */
export function redisUnavailable(detail?: string): PlatformError {
  const err = new PlatformError(
    503,
    "queue_unavailable",
    "the platform's Redis is unavailable (restarting or failing over); retry shortly",
    null,
    REDIS_DOWN_RETRY_AFTER_S,
  );
  // The connection's state goes to the log with the request id, never to the client (gateway/errors.ts).
  return detail === undefined ? err : withDetail(err, new Error(detail));
}

/** What the watch reads: an ioredis Redis or Cluster. */
type Watched = { status: string; on(event: string, listener: () => void): unknown };

export type RedisOutage = {
  /** True while the connection is not ready (reconnecting, or never connected yet). */
  readonly down: boolean;
  /**
   * When the connection last came back from an outage (0: none since the watch began). Whatever should have
   * been written to Redis meanwhile (a heartbeat) could not be: silence before this is no sign.
   */
  readonly readyAt: number;
  /**
   * Calls `listener` once the connection has been down for `afterMs` on end (at once if it
   * already has); returns the unsubscribe. A listener, not a shared promise: a promise raced by
   * every request would keep a reaction per request for as long as Redis stays up.
   */
  onLasting: (listener: (e: Error) => void) => () => void;
};

const watches = new WeakMap<object, RedisOutage>();

/** The one watch of `redis` (made on first use; listeners are added once per connection). */
export function outageOf(redis: Watched, afterMs = REDIS_WAIT_MS): RedisOutage {
  const known = watches.get(redis);
  if (known) return known;
  let timer: NodeJS.Timeout | undefined;
  let lasting: Error | undefined;
  let readyAt = 0;
  const listeners = new Set<(e: Error) => void>();
  const down = () => {
    if (timer) return;
    timer = setTimeout(() => {
      lasting = new Error(`Redis has been unreachable for ${afterMs} ms (connection ${redis.status})`);
      for (const l of listeners) l(lasting);
      listeners.clear();
    }, afterMs);
    timer.unref();
  };
  redis.on("close", down);
  redis.on("reconnecting", down);
  redis.on("end", down);
  redis.on("ready", () => {
    if (timer) readyAt = Date.now(); // back from an outage; the first connection is none
    clearTimeout(timer);
    timer = undefined;
    lasting = undefined;
  });
  const watch: RedisOutage = {
    get down() {
      return redis.status !== "ready";
    },
    get readyAt() {
      return readyAt;
    },
    onLasting: (listener) => {
      if (lasting) {
        listener(lasting);
        return () => undefined;
      }
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
  };
  watches.set(redis, watch);
  return watch;
}
