/**
 * The one XREAD loop over a Redis stream: reply streams (gateway, batch jobs,
 * outside producers) and, in tests and benchmarks, BullMQ's event streams.
 * A reader moves past entries only once its handler has returned, so a
 * handler that fails (Redis away while it stores an answer) sees the same
 * entries again instead of losing them.
 */
import type { RedisClient } from "../redis/connection.ts";

/** `[entry id, [field, value, field, value, ...]]`, as XREAD returns it. */
export type StreamEntry = [id: string, fields: string[]];
export type EntryHandler = (entries: StreamEntry[]) => void | Promise<void>;

export type StreamReaderOptions = {
  /** Read entries after this id; default `0-0` (the whole stream). */
  from?: string;
  /** Entries per read; default 1000. */
  count?: number;
  /** How long one blocking read waits for an entry; default 1000 ms. */
  blockMs?: number;
};

type XRead = [string, StreamEntry[]][] | null;

const RETRY_MS = 200;

export class StreamReader {
  readonly key: string;
  /** The id of the last entry handled: the next read starts after it. */
  position: string;
  private readonly redis: RedisClient;
  private readonly count: number;
  private readonly blockMs: number;
  private running = true;
  private loop: Promise<void> = Promise.resolve();

  /** `redis` is the reader's own: blocking reads hold it, and close() disconnects it. */
  constructor(redis: RedisClient, key: string, options: StreamReaderOptions = {}) {
    this.redis = redis;
    this.key = key;
    this.position = options.from ?? "0-0";
    this.count = options.count ?? 1000;
    this.blockMs = options.blockMs ?? 1000;
  }

  /**
   * One read after `position` (waiting up to blockMs for an entry unless `block` is false); the
   * entries, none when the wait ran out, go to `handle`. Returns how many there were.
   */
  async readOnce(handle: EntryHandler, { block = true }: { block?: boolean } = {}): Promise<number> {
    const result = (
      block
        ? await this.redis.xread("COUNT", this.count, "BLOCK", this.blockMs, "STREAMS", this.key, this.position)
        : await this.redis.xread("COUNT", this.count, "STREAMS", this.key, this.position)
    ) as XRead;
    const entries = result?.[0]?.[1] ?? [];
    await handle(entries);
    const last = entries.at(-1);
    if (last) this.position = last[0];
    return entries.length;
  }

  /** Reads until close(); a failed read or handler is tried again shortly from the same position. */
  start(handle: EntryHandler): void {
    this.loop = (async () => {
      while (this.running) {
        try {
          await this.readOnce(handle);
        } catch {
          if (!this.running) return;
          await new Promise((r) => setTimeout(r, RETRY_MS));
        }
      }
    })();
  }

  /** Drops the entries before `position` (already handled), on a connection that does not block. */
  async trim(redis: RedisClient): Promise<void> {
    await redis.xtrim(this.key, "MINID", this.position).catch(() => undefined);
  }

  async close(): Promise<void> {
    this.running = false;
    this.redis.disconnect();
    await this.loop;
  }
}
