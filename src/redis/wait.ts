/**
 * A bound on how long a request waits for Redis. The connection queues commands while it
 * reconnects and never fails them (BullMQ needs that), so without a bound a request would hang
 * for as long as Redis is away instead of answering 503 `queue_unavailable`.
 */

/** How long the gateway waits for Redis on a request's path. */
export const REDIS_WAIT_MS = 5_000;

/** `work`'s result, or an error naming the connection's state once REDIS_WAIT_MS has passed. */
export async function withinRedisWait<T>(work: Promise<T>, redis: { status: string }): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`Redis did not answer within ${REDIS_WAIT_MS} ms (connection ${redis.status})`)),
      REDIS_WAIT_MS,
    );
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}
