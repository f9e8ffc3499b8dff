/**
 * What every user of the model queues shares, after BullMQ's own QueueBase:
 * the Redis connections, the key prefix, one `Queue` per model queue (a Queue
 * holds connections and scripts, so one per queue and process is enough), the
 * queues' event streams and the stream readers. The dispatcher (online
 * requests), batch record jobs, the autoscaler, workers, benchmarks and test
 * producers all reach BullMQ through it; close() releases it all.
 */
import { type Processor, Queue, QueueEvents, Worker, type WorkerOptions } from "bullmq";
import { queueName } from "../contracts/naming.ts";
import { type Control, duplicate } from "../control/redis.ts";
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

  queueNamed(name: string): Queue {
    let q = this.queues.get(name);
    if (!q) {
      q = new Queue(name, { connection: this.ctl.redis, prefix: this.ctl.prefix });
      q.on("error", () => undefined); // surfaced on the calls that fail
      this.queues.set(name, q);
    }
    return q;
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
  worker<T, R>(model: string, version: string, processor: Processor<T, R>, options: Omit<WorkerOptions, "connection" | "prefix">): Worker<T, R> {
    const worker = new Worker<T, R>(queueName(model, version), processor, { ...options, connection: duplicate(this.ctl), prefix: this.ctl.prefix });
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
