/**
 * The gateway's side of the queue contract. Each gateway process owns one
 * Redis reply stream; every job it enqueues names that stream, workers append
 * the job's events to it, and one blocking reader routes them to the waiting
 * request by job id. One connection serves every in-flight request, and a
 * stream (unlike pub/sub) loses nothing if the reader falls behind.
 */
import { randomUUID } from "node:crypto";
import { type ConnectionOptions, Queue, QueueEvents } from "bullmq";
import type { Redis } from "ioredis";
import { BATCH_PRIORITY, decodeReplyEntry, JOB_SCHEMA_VERSION, JobError, type JobEvent, type JobPayloadInput } from "../contracts/job.ts";
import { queueName } from "../contracts/naming.ts";
import { type Control, duplicate } from "../control/redis.ts";
import { PlatformError, withDetail } from "../errors.ts";
import { RETRY_AFTER_S, withinRedisWait } from "./admission.ts";

/** What a caller supplies; the dispatcher fills in version, reply stream and deadline. */
export type Submission = DistributiveOmit<JobPayloadInput, "v" | "reply" | "deadline">;
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

export type SubmitOptions = {
  timeoutMs: number;
  batch?: boolean;
  /**
   * How long the job may wait for a replica to take it. Past it, a job still
   * waiting is withdrawn and the events end with a 503 `queue_timeout`.
   */
  queueWaitMs?: number;
};

export type JobHandle = {
  id: string;
  /**
   * The job's events in order; throws a 504 PlatformError when the deadline passes first, and
   * a 503 when the job is still waiting for a replica after `queueWaitMs`.
   */
  events: AsyncGenerator<JobEvent, void, undefined>;
  /** Tell the worker to stop (or drop the job if it has not started). Safe to call twice. */
  cancel: () => Promise<void>;
};

const CANCEL_MARK_TTL_MS = 600_000;
const COMPLETED_JOB_AGE_S = 300;
const FAILED_JOB_AGE_S = 3600;

export class Dispatcher {
  readonly replyStream: string;
  private readonly ctl: Control;
  private readonly reader: Redis;
  private readonly queues = new Map<string, Queue>();
  private readonly watchers = new Map<string, QueueEvents>();
  private readonly waiters = new Map<string, (event: JobEvent) => void>();
  private running = true;
  private readonly loop: Promise<void>;

  constructor(ctl: Control, gatewayId: string) {
    this.ctl = ctl;
    this.replyStream = ctl.keys.replyStream(gatewayId);
    this.reader = duplicate(ctl);
    this.loop = this.readReplies();
  }

  queue(model: string, version: string): Queue {
    const name = queueName(model, version);
    let q = this.queues.get(name);
    if (!q) {
      q = new Queue(name, { connection: this.ctl.redis, prefix: this.ctl.prefix });
      q.on("error", () => undefined); // surfaced on the calls that fail
      this.queues.set(name, q);
    }
    return q;
  }

  async submit(submission: Submission, options: SubmitOptions): Promise<JobHandle> {
    const id = randomUUID();
    const deadline = Date.now() + options.timeoutMs;
    const buffer: JobEvent[] = [];
    let wake: (() => void) | undefined;
    // Registered before the job exists, so not even the first event can be missed.
    this.waiters.set(id, (event) => {
      buffer.push(event);
      wake?.();
    });
    const queueDeadline = options.queueWaitMs === undefined ? undefined : Date.now() + options.queueWaitMs;
    const payload = { ...submission, v: JOB_SCHEMA_VERSION, reply: { stream: this.replyStream }, deadline, queue_deadline: queueDeadline };
    const queue = this.queue(submission.model, submission.version);
    this.watch(queue.name);
    try {
      await withinRedisWait(queue.add(submission.kind, payload, {
        jobId: id,
        priority: options.batch ? BATCH_PRIORITY : undefined,
        // The answer travels on the reply stream (and the queue's event stream), never read from the
        // job afterwards: a finished online job is deleted at once, so no prompt outlives its request.
        removeOnComplete: options.batch ? { age: COMPLETED_JOB_AGE_S } : true,
        removeOnFail: options.batch ? { age: FAILED_JOB_AGE_S } : true,
      }), this.ctl.redis);
    } catch (e) {
      this.waiters.delete(id);
      // ioredis' message names the Redis address: it stays in the gateway log.
      throw withDetail(new PlatformError(503, "queue_unavailable", "could not enqueue the request: the queue is unavailable, retry shortly", null, 1), e);
    }

    const waiters = this.waiters;
    // Until an event shows a replica has the job, it may still be waiting in the queue. (A replica
    // that holds it without a free sequence fails it itself at the queue deadline.)
    let waitingUntil = queueDeadline ?? Infinity;
    async function* events(): AsyncGenerator<JobEvent, void, undefined> {
      try {
        for (;;) {
          const event = buffer.shift();
          if (event) {
            waitingUntil = Infinity;
            yield event;
            if (event.type === "done" || event.type === "error") return;
            continue;
          }
          if (Date.now() >= waitingUntil) {
            waitingUntil = Infinity;
            if (await stillWaiting()) {
              await cancel();
              throw new PlatformError(
                503,
                "queue_timeout",
                `no replica took the request within ${options.queueWaitMs} ms (max queue wait); the endpoint is overloaded or still scaling up, retry later`,
                null,
                RETRY_AFTER_S.queue_timeout,
              );
            }
            // A replica holds the job. Its answer may have arrived during the check (a replica
            // that prefetched it fails it at this same deadline): look at the buffer before sleeping.
            continue;
          }
          const left = deadline - Date.now();
          if (left <= 0) throw new PlatformError(504, "timeout", `no answer within ${options.timeoutMs} ms; the request was cancelled`);
          const sleep = Math.min(left, waitingUntil - Date.now());
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, sleep);
            wake = () => {
              clearTimeout(timer);
              resolve();
            };
          });
          wake = undefined;
        }
      } finally {
        waiters.delete(id);
      }
    }

    const stillWaiting = async () => {
      const state = await queue.getJobState(id).catch(() => "unknown");
      return state === "waiting" || state === "prioritized";
    };
    let cancelled = false;
    const cancel = async () => {
      if (cancelled) return;
      cancelled = true;
      this.waiters.delete(id);
      await this.ctl.redis.set(this.ctl.keys.cancelled(id), "1", "PX", CANCEL_MARK_TTL_MS);
      await this.ctl.redis.publish(this.ctl.keys.cancelChannel, id);
      const job = await queue.getJob(id);
      if (job && (await job.isWaiting())) await job.remove().catch(() => undefined);
    };
    return { id, events: events(), cancel };
  }

  /**
   * Failures no worker reports on the reply stream, learnt from the queue's own events:
   * - `stalled`: the replica running the job died and the job went back to the queue. It is
   *   passed on as a `started` event (a new attempt), which ends a stream that already sent
   *   tokens with `replica_lost` at once; other requests just wait for the retry.
   * - `failed`: BullMQ failed the job itself, e.g. "job stalled more than allowable limit" after
   *   a second replica died with it. Without this the request would wait for its timeout.
   */
  private watch(name: string): void {
    if (this.watchers.has(name)) return;
    // Its own connection, from options, which BullMQ closes with it (XREAD blocks).
    const events = new QueueEvents(name, { connection: this.ctl.redisOptions as ConnectionOptions, prefix: this.ctl.prefix });
    events.on("error", () => undefined); // QueueEvents reconnects by itself
    events.on("stalled", ({ jobId }) => this.waiters.get(jobId)?.({ type: "started", replica: "(requeued after a replica stopped)", attempt: 0 }));
    events.on("failed", ({ jobId, failedReason }) => {
      const waiter = this.waiters.get(jobId);
      if (waiter) waiter({ type: "error", error: jobErrorFromFailure(failedReason) });
    });
    this.watchers.set(name, events);
  }

  private async readReplies(): Promise<void> {
    let lastId = "0-0";
    let lastTrim = Date.now();
    while (this.running) {
      let result: [string, [string, string[]][]][] | null;
      try {
        result = (await this.reader.xread("COUNT", 1000, "BLOCK", 1000, "STREAMS", this.replyStream, lastId)) as typeof result;
      } catch {
        if (!this.running) return;
        await new Promise((r) => setTimeout(r, 200));
        continue;
      }
      for (const [, entries] of result ?? []) {
        for (const [entryId, fields] of entries) {
          lastId = entryId;
          const entry = decodeReplyEntry(fields);
          if ("problem" in entry) console.error(`[dispatcher] skipped reply entry ${entryId} on ${this.replyStream}: ${entry.problem}`);
          else this.waiters.get(entry.jobId)?.(entry.event);
        }
      }
      if (Date.now() - lastTrim > 5000) {
        lastTrim = Date.now();
        // Entries already routed are of no further use.
        await this.ctl.redis.xtrim(this.replyStream, "MINID", lastId).catch(() => undefined);
      }
    }
  }

  async close(): Promise<void> {
    this.running = false;
    this.reader.disconnect();
    await this.loop;
    await Promise.all([...this.queues.values()].map((q) => q.close()));
    await Promise.all([...this.watchers.values()].map((w) => w.close().catch(() => undefined)));
    await this.ctl.redis.del(this.replyStream).catch(() => undefined);
  }
}

/**
 * A worker fails a job with its JobError as JSON, and has already sent the same error on the
 * reply stream; anything else is BullMQ failing the job on its own.
 */
export function jobErrorFromFailure(failedReason: string): JobError {
  try {
    const parsed = JobError.safeParse(JSON.parse(failedReason));
    if (parsed.success) return parsed.data;
  } catch {
    // not JSON: BullMQ's own reason
  }
  if (/stalled/i.test(failedReason)) {
    return { status: 502, code: "replica_lost", param: null, message: "the replicas serving this request stopped twice while running it; retry the request" };
  }
  return { status: 500, code: "job_failed", param: null, message: `the request failed: ${failedReason}` };
}
