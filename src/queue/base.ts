/**
 * What every user of the model queues shares, after BullMQ's own QueueBase:
 * the Redis connections, the key prefix, one `Queue` per model queue (a Queue
 * holds connections and scripts, so one per queue and process is enough), the
 * queues' event streams and the stream readers. The dispatcher (online
 * requests), batch record jobs, the batch coordinator queue and its
 * coordinators, the autoscaler, workers, benchmarks and tests all reach BullMQ
 * through it; close() releases it all but the workers, which their owners close.
 */
import { type Processor, Queue, QueueEvents, Worker, type WorkerOptions } from "bullmq";
import { queueName } from "../contracts/naming.ts";
import { type Control, duplicate, type RedisClient } from "../redis/connection.ts";
import { StreamReader, type StreamReaderOptions } from "./stream-reader.ts";

/** Covers the start-up of an event reader and any clock skew between this host and Redis (stream ids are Redis time). */
const EVENTS_LOOKBACK_MS = 5_000;

export class QueueBase {
  readonly ctl: Control;
  private readonly queues = new Map<string, Queue>();
  private readonly watchers = new Map<string, QueueEvents>();
  private readonly readers = new Set<StreamReader>();

  constructor(ctl: Control) {
    this.ctl = ctl;
  }

  /** The queue `<model>@<version>`. */
  queue(model: string, version: string): Queue {
    return this.queueNamed(queueName(model, version));
  }

  /** Any queue under the prefix by its full name (the batch coordinator queue, say). `T`: its jobs' data. */
  queueNamed<T = unknown>(name: string): Queue<T> {
    let q = this.queues.get(name);
    if (!q) {
      q = new Queue(name, { connection: this.ctl.redis, prefix: this.ctl.prefix });
      q.on("error", () => undefined); // surfaced on the calls that fail
      this.queues.set(name, q);
    }
    return q as Queue<T>;
  }

  /** The queue's event stream, one reader per queue and process. */
  events(name: string): QueueEvents {
    let events = this.watchers.get(name);
    if (!events) {
      // BullMQ reads events on a duplicate of the connection it is given (XREAD blocks) and closes it with
      // them. Left alone it starts at "$" when its first XREAD arrives, which (a new Cluster client above
      // all) can be after a job added meanwhile has finished: its `completed` would never be heard.
      // Starting a little earlier replays a few events instead, and every listener keys them by job id.
      const lastEventId = `${Date.now() - EVENTS_LOOKBACK_MS}-0`;
      events = new QueueEvents(name, { connection: this.ctl.redis, prefix: this.ctl.prefix, lastEventId });
      events.on("error", () => undefined); // QueueEvents reconnects by itself
      this.watchers.set(name, events);
    }
    return events;
  }

  /** A worker on the queue `<model>@<version>`, on a connection of its own; the caller closes it. */
  worker<T, R>(
    model: string,
    version: string,
    processor: Processor<T, R>,
    options: Omit<WorkerOptions, "connection" | "prefix">,
  ): Worker<T, R> {
    return this.workerNamed(queueName(model, version), processor, options);
  }

  /** A worker on any queue under the prefix by its full name, on a connection of its own; the caller closes it (and with it the connection). */
  workerNamed<T, R>(
    name: string,
    processor: Processor<T, R>,
    options: Omit<WorkerOptions, "connection" | "prefix">,
  ): Worker<T, R> {
    const worker = new OwnWorker<T, R>(name, processor, { ...options, prefix: this.ctl.prefix }, duplicate(this.ctl));
    worker.on("error", () => undefined); // connection errors are retried by BullMQ itself
    return worker;
  }

  /** A reader of the stream `key` on a connection of its own (its reads block). */
  reader(key: string, options: StreamReaderOptions = {}): StreamReader {
    const reader = new StreamReader(duplicate(this.ctl), key, options);
    this.readers.add(reader);
    return reader;
  }

  async close(): Promise<void> {
    await Promise.all([...this.readers].map((r) => r.close()));
    await Promise.all([...this.queues.values()].map((q) => q.close().catch(() => undefined)));
    await Promise.all([...this.watchers.values()].map((w) => w.close().catch(() => undefined)));
  }
}

/**
 * BullMQ never quits a connection it was handed (it may be shared). Each
 * worker here gets one nobody else holds, so it goes with the worker, once
 * the worker's jobs have ended; otherwise every closed worker would leave one.
 */
class OwnWorker<T, R> extends Worker<T, R> {
  private readonly own: RedisClient;

  constructor(name: string, processor: Processor<T, R>, options: Omit<WorkerOptions, "connection">, own: RedisClient) {
    super(name, processor, { ...options, connection: own });
    this.own = own;
  }

  override async close(force?: boolean): Promise<void> {
    await super.close(force);
    await this.own.quit().catch(() => undefined);
  }
}
