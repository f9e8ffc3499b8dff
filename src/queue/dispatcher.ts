/**
 * The gateway's side of the queue contract: enqueue a request and await its
 * events. Each gateway process owns one Redis reply stream; every job it
 * enqueues names that stream, workers append the job's events to it, and one
 * blocking reader routes them to the waiting request by job id. One
 * connection serves every in-flight request, and a stream (unlike pub/sub)
 * loses nothing if the reader falls behind.
 *
 * Everything a request must hear comes on that stream, a dead replica's fate
 * included (src/queue/reclaim.ts writes it there), so the gateway reads no
 * BullMQ event stream: no per-job wake-ups for events nobody waits for. Were
 * no supervisor or scaler running to notice a death, the periodic check for
 * a vanished job still ends the request (`job_lost`).
 */
import { randomUUID } from "node:crypto";
import { JOB_SCHEMA_VERSION, type JobEvent, type JobPayloadInput, RETRY_AFTER_S } from "../contracts/job.ts";
import type { Control } from "../redis/connection.ts";
import { outageOf, redisUnavailable } from "../redis/outage.ts";
import { REDIS_WAIT_MS, withinRedisWait } from "../redis/wait.ts";
import { currentTraceparent } from "../telemetry/tracing.ts";
import { PlatformError, withDetail } from "../contracts/errors.ts";
import { QueueBase } from "./base.ts";
import { cancelJobs } from "./cancel.ts";
import { bandHead, placeFairly } from "./fair-share.ts";
import { moveWaiting } from "./lanes.ts";
import { replyHandler } from "./replies.ts";
import type { StreamReader } from "./stream-reader.ts";

/** What a caller supplies; the dispatcher fills in version, reply stream and deadline. */
export type Submission = DistributiveOmit<JobPayloadInput, "v" | "reply" | "deadline">;
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

export type SubmitOptions = {
  timeoutMs: number;
  /**
   * How long the job may wait for a replica to take it. Past it, a job still
   * waiting is withdrawn and the events end with a 503 `queue_timeout`.
   */
  queueWaitMs?: number;
  /** The endpoint's queue (engines.ts `endpointQueueName`); absent: the model version's default queue. */
  queue?: string;
  /**
   * The job's estimated tokens (prompt plus what it may generate). With the submission's `tenant`,
   * the job takes its fair place in its priority band (fair-share.ts); without, it goes unprioritized.
   */
  cost?: number;
  /** Nothing waits in the queue (admission's view): a fair job takes its band's head, no tag computed. */
  idle?: boolean;
  /**
   * The lane of the replica the prompt's prefix hashes to (lanes.ts): the job goes there unless
   * `maxDepth` jobs already wait in it, and moves to the shared queue if no replica took it
   * within `waitMs`.
   */
  lane?: { name: string; maxDepth: number; waitMs: number };
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

/** Entries already routed are trimmed this often. */
const TRIM_EVERY_MS = 5000;

export type DispatcherOptions = {
  /**
   * How often a request with no news asks whether its job still exists. A job can vanish when
   * Redis fails over before it replicated the job; two checks in a row that find neither the
   * job nor its answer end the request with a retryable 503 `job_lost` instead of a wait for
   * the timeout. Two, because a finished job is deleted at once and its answer may still be
   * on its way from the reply stream.
   */
  lostJobCheckMs?: number;
  /** A job given a lane was taken from it (`affine`) or went to the shared queue (`spilled`). */
  onPrefixRoute?: (outcome: "affine" | "spilled") => void;
};

export class Dispatcher extends QueueBase {
  readonly replyStream: string;
  private readonly replies: StreamReader;
  private readonly waiters = new Map<string, (event: JobEvent) => void>();
  private lastTrim = Date.now();
  private readonly lostJobCheckMs: number;
  private readonly onPrefixRoute: DispatcherOptions["onPrefixRoute"];

  constructor(ctl: Control, gatewayId: string, options: DispatcherOptions = {}) {
    super(ctl);
    this.lostJobCheckMs = options.lostJobCheckMs ?? 5000;
    this.onPrefixRoute = options.onPrefixRoute;
    this.replyStream = ctl.keys.replyStream(gatewayId);
    this.replies = this.reader(this.replyStream);
    const route = replyHandler(`dispatcher ${this.replyStream}`, (jobId, event) => this.waiters.get(jobId)?.(event));
    this.replies.start(async (entries) => {
      await route(entries);
      if (Date.now() - this.lastTrim > TRIM_EVERY_MS) {
        this.lastTrim = Date.now();
        await this.replies.trim(this.ctl.redis);
      }
    });
  }

  /** Jobs whose answer has not arrived yet (their reply waiters). */
  get awaiting(): number {
    return this.waiters.size;
  }

  async submit(submission: Submission, options: SubmitOptions): Promise<JobHandle> {
    const id = randomUUID();
    const deadline = Date.now() + options.timeoutMs;
    const buffer: JobEvent[] = [];
    let wake: (() => void) | undefined;
    // Registered before the job exists, so not even the first event can be missed. Removed with
    // the job's last event: a caller that stops reading once it has its answer (and so never
    // resumes the generator into its `finally`) must not leave it here for the gateway's lifetime.
    let settle: ((tokens: number) => void) | undefined;
    this.waiters.set(id, (event) => {
      if (event.type === "done") settle?.(event.result.usage.total_tokens);
      buffer.push(event);
      if (event.type === "done" || event.type === "error") this.waiters.delete(id);
      wake?.();
    });
    const queueDeadline = options.queueWaitMs === undefined ? undefined : Date.now() + options.queueWaitMs;
    // The request's trace context (undefined while tracing is off), so the replica's spans join its trace.
    const traceparent = currentTraceparent();
    const payload = {
      ...submission,
      v: JOB_SCHEMA_VERSION,
      reply: { stream: this.replyStream },
      deadline,
      queue_deadline: queueDeadline,
      ...(traceparent && { traceparent }),
    };
    const queue = options.queue ? this.queueNamed(options.queue) : this.queue(submission.model, submission.version);
    const redis = this.ctl.redis;
    // Where the job is now: its replica's lane while it waits there, else the shared queue.
    let current = queue;
    const lane = options.lane && this.queueNamed(options.lane.name);
    const route = this.onPrefixRoute;
    let laneUntil = Infinity;
    try {
      // Its place in its band (fair-share.ts); every band goes before batch records (BATCH_PRIORITY).
      let priority: number | undefined;
      if (submission.tenant && options.cost !== undefined && options.idle)
        priority = bandHead(submission.priority ?? 0);
      else if (submission.tenant && options.cost !== undefined) {
        const placed = await withinRedisWait(
          placeFairly(redis, queue.qualifiedName, queue.keys.prioritized as string, {
            tenant: submission.tenant,
            priority: submission.priority ?? 0,
            tokens: options.cost,
          }),
          redis,
        );
        priority = placed.bullPriority;
        settle = (tokens) => void placed.settle(redis, tokens).catch(() => undefined);
      }
      // The answer travels on the reply stream (and the queue's event stream), never read from the
      // job afterwards: a finished online job is deleted at once, so no prompt outlives its request.
      if (lane && options.lane) {
        const depth = await withinRedisWait(lane.getJobCountByTypes("wait", "prioritized"), redis);
        if (depth < options.lane.maxDepth) {
          current = lane;
          laneUntil = Date.now() + options.lane.waitMs;
        } else route?.("spilled");
      }
      await withinRedisWait(
        current.add(submission.kind, payload, { jobId: id, removeOnComplete: true, removeOnFail: true, priority }),
        redis,
      );
    } catch (e) {
      this.waiters.delete(id);
      // ioredis' message names the Redis address: it stays in the gateway log.
      throw withDetail(
        new PlatformError(
          503,
          "queue_unavailable",
          "could not enqueue the request: the queue is unavailable, retry shortly",
          null,
          1,
        ),
        e,
      );
    }

    const waiters = this.waiters;
    // Until an event shows a replica has the job, it may still be waiting in the queue. (A replica
    // that holds it without a free sequence fails it itself at the queue deadline.)
    let waitingUntil = queueDeadline ?? Infinity;
    const lostJobCheckMs = this.lostJobCheckMs;
    const outage = outageOf(this.ctl.redis);
    let nextCheck = Date.now() + lostJobCheckMs;
    let missingBefore = false;
    async function* events(): AsyncGenerator<JobEvent, void, undefined> {
      try {
        for (;;) {
          const event = buffer.shift();
          if (event) {
            if (laneUntil !== Infinity && current === lane) route?.("affine");
            laneUntil = Infinity;
            waitingUntil = Infinity;
            yield event;
            if (event.type === "done" || event.type === "error") return;
            continue;
          }
          if (Date.now() >= laneUntil) {
            laneUntil = Infinity;
            // Not taken by its replica in time: any replica may take it now.
            if (lane && (await moveWaiting(redis, lane, queue, id).catch(() => false))) {
              current = queue;
              route?.("spilled");
            } else route?.("affine");
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
          if (Date.now() >= nextCheck) {
            nextCheck = Date.now() + lostJobCheckMs;
            // A lane's job may have moved to the shared queue (its replica died: reclaim.ts).
            const stateIn = (q: typeof queue) => q.getJobState(id).catch(() => "not known");
            const missing =
              (await stateIn(current)) === "unknown" && (current === queue || (await stateIn(queue)) === "unknown");
            if (missing && missingBefore && buffer.length === 0) {
              throw new PlatformError(
                503,
                "job_lost",
                "the request was lost before it finished (a Redis failover, or replicas that stopped with nothing watching them); send it again",
                null,
                RETRY_AFTER_S.job_lost,
              );
            }
            missingBefore = missing;
            continue;
          }
          const left = deadline - Date.now();
          if (left <= 0)
            throw new PlatformError(
              504,
              "timeout",
              `no answer within ${options.timeoutMs} ms; the request was cancelled`,
            );
          const sleep = Math.min(left, waitingUntil - Date.now(), nextCheck - Date.now(), laneUntil - Date.now());
          // Redis away for long: no answer can come (and none be cancelled) until it is back.
          let lasted = false;
          const unsubscribe = outage.onLasting(() => {
            lasted = true;
            wake?.();
          });
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, sleep);
            wake = () => {
              clearTimeout(timer);
              resolve();
            };
            if (lasted) wake();
          });
          unsubscribe();
          wake = undefined;
          if (lasted && buffer.length === 0)
            throw redisUnavailable(`Redis did not answer within ${REDIS_WAIT_MS} ms while a reply was awaited`);
        }
      } finally {
        waiters.delete(id);
      }
    }

    const stillWaiting = async () => {
      const waiting = async (q: typeof queue) => {
        const state = await q.getJobState(id).catch(() => "unknown");
        return state === "waiting" || state === "prioritized";
      };
      return (await waiting(current)) || (current !== queue && (await waiting(queue)));
    };
    let cancelled = false;
    const cancel = async () => {
      if (cancelled) return;
      cancelled = true;
      this.waiters.delete(id);
      await cancelJobs(this.ctl, queue, [id]);
      if (lane) await lane.remove(id).catch(() => undefined);
    };
    return { id, events: events(), cancel };
  }

  override async close(): Promise<void> {
    await super.close();
    await this.ctl.redis.del(this.replyStream).catch(() => undefined);
  }
}
