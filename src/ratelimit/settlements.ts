/**
 * The writes of requests that have ended (Settlements): their limiter finishes, batched per turn
 * of the event loop, and their usage, summed and written once a second; none on a response's
 * path.
 */
import type { Control } from "../redis/connection.ts";
import { causeFields, logger } from "../telemetry/log.ts";
import { type UsageDelta, UsageTally } from "../usage/counters.ts";
import type { Finish, RateLimiter } from "./limiter.ts";

/** How often a gateway writes the usage it has summed (Settlements): what it loses at most if it dies. */
export const USAGE_FLUSH_MS = 1_000;

const log = logger("ratelimit");

/**
 * The writes of requests that have ended: each one's limiter finish (release, settle) and usage.
 * Finishes are sent on the next check phase of the event loop, once the responses of this turn
 * have been written, so no response waits for them, in one pipeline for every request that ended
 * in the turn (on a Redis Cluster, whose pipelines cannot span slots, each finish on its own).
 * Usage is summed in memory and written every USAGE_FLUSH_MS in one pipeline (with the finishes
 * of that turn): a gateway that dies loses at most that long of counts, never a limit, which
 * the finishes and the admission script keep in Redis. Nothing waits for the answers either: a
 * failure is logged (a finish that met NOSCRIPT, a Redis that lost its scripts, is sent again
 * on its own by ioredis, src/redis/scripts.ts).
 *
 * Order still holds where it matters: on the gateway's one connection a request's release is
 * written before any request this gateway reads afterwards, so a client that sends its next
 * request once the last is answered never finds its own slot still taken.
 */
export class Settlements {
  private readonly ctl: Control;
  private readonly limiter: RateLimiter;
  private finishes: Finish[] = [];
  private readonly usage = new UsageTally();
  private usageDue: NodeJS.Timeout | undefined;
  private readonly writing = new Set<Promise<void>>();

  constructor(ctl: Control, limiter: RateLimiter) {
    this.ctl = ctl;
    this.limiter = limiter;
  }

  /** Queues a request's finish (if limited) and adds its usage, counted in the minute of now. */
  add(finish: Finish | undefined, usage: UsageDelta): void {
    this.usage.add(usage, Date.now());
    if (!this.usageDue) {
      this.usageDue = setTimeout(() => this.flush(true), USAGE_FLUSH_MS);
      this.usageDue.unref();
    }
    if (!finish) return;
    this.finishes.push(finish);
    if (this.finishes.length === 1) setImmediate(() => this.flush(false));
  }

  /** Writes everything added so far and resolves once it has been written, or has failed and been logged (close, tests). */
  async drain(): Promise<void> {
    this.flush(true);
    await Promise.all(this.writing);
  }

  private flush(withUsage: boolean): void {
    if (withUsage) {
      clearTimeout(this.usageDue);
      this.usageDue = undefined;
    }
    const finishes = this.finishes;
    if (finishes.length === 0 && !(withUsage && this.usage.size > 0)) return;
    this.finishes = [];
    const redis = this.ctl.redis;
    const works: Promise<void>[] = [];
    const pipeline = redis.pipeline();
    if (redis.isCluster) {
      for (const f of finishes) works.push(this.limiter.end(f).catch(logged("releasing and settling a rate limit")));
    } else {
      for (const f of finishes) this.limiter.finishInto(pipeline, f);
    }
    if (withUsage) this.usage.drainInto(pipeline, this.ctl);
    const queued = redis.isCluster ? 0 : finishes.length;
    if (pipeline.length > 0) {
      works.push(
        pipeline.exec().then(
          (results) => this.checked(results ?? [], queued),
          (e: unknown) => logged("recording usage and settling rate limits")(e),
        ),
      );
    }
    const written = Promise.all(works).then(() => undefined);
    this.writing.add(written);
    void written.finally(() => this.writing.delete(written));
  }

  /**
   * The pipeline's answers: its first `finishes` are the finishes', the rest usage's. A finish
   * that met NOSCRIPT is not among the failures: ioredis sent it again, whole, and its answer here
   * is that one's.
   */
  private checked(results: [Error | null, unknown][], finishes: number): void {
    let usageFailed: Error | undefined;
    results.forEach(([err], i) => {
      if (!err) return;
      if (i < finishes) logged("releasing and settling a rate limit")(err);
      else usageFailed ??= err;
    });
    if (usageFailed) logged("recording usage")(usageFailed);
  }
}

/** A failure off the response's path (its answer is already decided): logged, never thrown. */
function logged(what: string): (e: unknown) => void {
  return (e) => log.error(causeFields(e), `${what} failed: ${e instanceof Error ? e.message : String(e)}`);
}
