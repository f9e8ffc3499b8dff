/**
 * Rate limits and usage on the request path: a Hono middleware factory (configured by options,
 * as hono's bearerAuth is) that gives every /v1 request a RequestMeter. The route admits the
 * request through it once it knows the model and version serving it (serve-text.ts, openai.ts),
 * reports the worker's usage when it arrives, and the middleware ends it when the response has
 * been sent, failed or abandoned: slots released, tokens settled, usage counted.
 *
 * A key without limits costs no Redis round trip here: its meter only counts usage. A limited
 * key costs one script at admission, the only write a request waits for, unless its limits are
 * large enough for the gateway to hold part of them ahead (allowances.ts). Its end (release and
 * settle) is written after the response has gone out, in one pipeline for all the requests that
 * ended in that turn of the event loop; every request's usage is summed and written once a
 * second (Settlements). A limited key's other responses (listings, errors before admission)
 * carry the `x-ratelimit-*` headers from one read-only check. docs/traffic.md has the details.
 */
import type { Context, MiddlewareHandler } from "hono";
import type { Usage } from "../contracts/job.ts";
import { hasLimits } from "../contracts/limits.ts";
import type { ApiKeyRecord } from "../contracts/records.ts";
import { type Finish, isNoScript, type LimitKind, type RateLimiter, type Scope, type ScopeState, scopesFor, type Verdict } from "../control/ratelimits.ts";
import type { Control } from "../control/redis.ts";
import { type UsageDelta, UsageTally } from "../control/usage.ts";
import { PlatformError, withDetail } from "../errors.ts";
import { withinRedisWait } from "../queue/admission.ts";
import type { Submission } from "../queue/dispatcher.ts";
import { causeFields, logger } from "../telemetry/log.ts";
import { type Admission, Allowances } from "./allowances.ts";
import type { GatewayEnv } from "./env.ts";
import { onClientGone } from "./client-gone.ts";

/** How often a gateway writes the usage it has summed (Settlements): what it loses at most if it dies. */
export const USAGE_FLUSH_MS = 1_000;

/** Completion tokens reserved for a request that sets no max_tokens (never more than its tpm allows); settled to the real count. */
export const DEFAULT_COMPLETION_RESERVATION = 256;

export type RateLimitOptions = {
  ctl: Control;
  limiter: RateLimiter;
  /** A refusal, for metrics: the model and version it was for and the limit that refused it. */
  onReject?: (target: { model: string; version: string }, kind: LimitKind) => void;
};

/** What a request will cost in tokens before it runs: its prompt, estimated, and the completion it may produce. */
export type Reservation = { promptTokens: number; maxTokens: number | undefined };

/**
 * About 4 bytes per token, as in common English BPE vocabularies. Only the reservation uses it:
 * the worker's exact count replaces it when the request completes.
 */
export function estimateTokens(texts: string[]): number {
  let bytes = 0;
  for (const t of texts) bytes += Buffer.byteLength(t, "utf8");
  return Math.ceil(bytes / 4);
}

export function reservationOf(submission: Submission): Reservation {
  switch (submission.kind) {
    case "chat":
      return { promptTokens: estimateTokens(submission.messages.map((m) => m.content)), maxTokens: submission.params?.max_tokens };
    case "completion":
    case "generate":
    case "batch_record":
      return { promptTokens: estimateTokens([submission.prompt]), maxTokens: submission.params?.max_tokens };
    case "embedding": {
      // Token-id inputs are counted exactly; texts are estimated.
      const texts = submission.input.filter((i): i is string => typeof i === "string");
      const ids = submission.input.reduce((n, i) => n + (typeof i === "string" ? 0 : i.length), 0);
      return { promptTokens: estimateTokens(texts) + ids, maxTokens: 0 };
    }
  }
}

/** The request's meter, where the rate-limit middleware runs (undefined elsewhere, e.g. a bare route in a test). */
export function meterOf(c: Context): RequestMeter | undefined {
  return c.get("meter") as RequestMeter | undefined;
}

/**
 * The middleware; `drain`: resolves once the writes of every request that has ended are done;
 * `close`: gives back the budget this gateway holds ahead, then drains (the gateway awaits it
 * when it closes, so no release, settlement or usage is lost at shutdown).
 */
export function rateLimit(options: RateLimitOptions): MiddlewareHandler<GatewayEnv> & { drain: () => Promise<void>; close: () => Promise<void> } {
  const settlements = new Settlements(options.ctl, options.limiter);
  const allowances = new Allowances(options.limiter);
  const middleware: MiddlewareHandler<GatewayEnv> = async (c, next) => {
    const meter = new RequestMeter(options, { settlements, allowances }, c, c.get("apiKey"));
    c.set("meter", meter);
    try {
      await next();
    } catch (e) {
      // Hono answers handlers' errors through onError, so this is only a failing error handler: end all the same.
      meter.end({ status: 500 });
      throw e;
    }
    if (meter.needsHeaders) await meter.peekHeaders();
    const res = c.res;
    // A stream ends when its last byte is sent or the client leaves, long after the handler returned.
    // The content type first: reading `res.body` turns @hono/node-server's lightweight response into a full one.
    if (meter.admitted && res.headers.get("content-type")?.startsWith("text/event-stream") && res.body) {
      c.res = new Response(
        untilClosed(res.body, () => meter.end({ streamed: true })),
        res,
      );
    } else meter.end({ status: res.status });
  };
  const close = async () => {
    await allowances.close();
    await settlements.drain();
  };
  return Object.assign(middleware, { drain: () => settlements.drain(), close });
}

/** One request's admission, usage and end. Every method but `admit` is cheap and never throws. */
export class RequestMeter {
  private readonly options: RateLimitOptions;
  private readonly settlements: Settlements;
  private readonly allowances: Allowances;
  private readonly c: Context<GatewayEnv>;
  private readonly key: ApiKeyRecord;
  /** The request's entry in the limiter (when limits apply), minted by the gateway: never the caller's x-request-id, which a client could repeat. */
  private admission: Admission | undefined;
  private target: { model: string; version: string } | undefined;
  private scopes: Scope[] = [];
  private reported = false;
  private usage: Pick<Usage, "prompt_tokens" | "completion_tokens"> | undefined;
  private failed = false;
  private ended = false;

  constructor(options: RateLimitOptions, shared: { settlements: Settlements; allowances: Allowances }, c: Context<GatewayEnv>, key: ApiKeyRecord) {
    this.options = options;
    this.settlements = shared.settlements;
    this.allowances = shared.allowances;
    this.c = c;
    this.key = key;
  }

  get admitted(): boolean {
    return this.target !== undefined;
  }

  /** A limited key's response that carries no rate-limit headers yet. */
  get needsHeaders(): boolean {
    return !this.reported && hasLimits(this.key.limits);
  }

  /**
   * Admits the request for `model` served by `version` (the version routing chose for it), or
   * throws the 429. Without limits on the key (or this model) it touches nothing.
   */
  async admit(target: { model: string; version: string }, reservation: Reservation): Promise<void> {
    const scopes = scopesFor(this.key.limits, target.model);
    if (scopes.length > 0) {
      const admission = await this.check(() => this.allowances.admit(this.key.id, scopes, this.tokensFor(scopes, reservation)));
      const verdict = admission.verdict;
      this.setHeaders(verdict, (name, value) => this.c.header(name, value));
      if (!verdict.admitted) {
        const first = verdict.exceeded[0];
        this.options.onReject?.(target, first?.kind ?? "requests");
        this.settlements.add(undefined, { key: this.key.id, ...target, rate_limited: 1 });
        throw refusal(this.key, verdict, this.tokensFor(scopes, reservation), this.options.limiter.windowMs);
      }
      this.scopes = scopes;
      this.admission = admission;
      // A client that leaves frees its slot at once, not when the abandoned work ends.
      onClientGone(this.c, () => this.end({ disconnected: true }));
    }
    this.target = target;
  }

  /** The worker's count for the request: settles its tokens and is what usage records. */
  complete(usage: Pick<Usage, "prompt_tokens" | "completion_tokens">): void {
    this.usage = usage;
    // Arrived after the client left: the reservation kept then is corrected now.
    if (this.ended && this.target) {
      const total = usage.prompt_tokens + usage.completion_tokens;
      const member = this.admission?.member;
      const settle = member !== undefined && this.scopes.some((s) => s.limits.tpm !== undefined) ? { keyId: this.key.id, scopes: this.scopes, member, actual: total, release: false } : undefined;
      this.settlements.add(settle, { key: this.key.id, ...this.target, prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens });
    }
  }

  /** The request failed after its response started (an error event in a stream). */
  fail(): void {
    this.failed = true;
  }

  /**
   * The request is over: released, settled (to the worker's count; to 0 for an error answered
   * before any output; otherwise the reservation stands), and counted. Once only. The writes go
   * out once the response has (Settlements).
   */
  end(how: { status?: number; streamed?: boolean; disconnected?: boolean }): void {
    if (this.ended) return;
    this.ended = true;
    if (!this.target) return;
    const errored = this.failed || (!how.disconnected && !how.streamed && (how.status ?? 200) >= 400);
    let finish: Finish | undefined;
    if (this.admission) {
      const actual = this.usage ? this.usage.prompt_tokens + this.usage.completion_tokens : errored && !how.streamed ? 0 : undefined;
      finish = { keyId: this.key.id, scopes: this.scopes, ...this.allowances.finishOf(this.admission, actual) };
    }
    this.settlements.add(finish, {
      key: this.key.id,
      ...this.target,
      requests: 1,
      prompt_tokens: this.usage?.prompt_tokens,
      completion_tokens: this.usage?.completion_tokens,
      errors: errored ? 1 : 0,
    });
  }

  /** The headers for a limited key's response that admitted nothing: the key's own scope, read only. */
  async peekHeaders(): Promise<void> {
    this.reported = true;
    const scopes = scopesFor(this.key.limits);
    if (scopes.length === 0) return;
    try {
      const verdict = await withinRedisWait(this.options.limiter.peek(this.key.id, scopes), this.options.ctl.redis);
      const headers = this.c.res.headers;
      this.setHeaders(verdict, (name, value) => headers.set(name, value));
    } catch (e) {
      // The response itself is fine: it goes without the headers.
      logged("reading rate-limit state")(e);
    }
  }

  private tokensFor(scopes: Scope[], r: Reservation): number {
    if (r.maxTokens !== undefined) return r.promptTokens + r.maxTokens;
    // No max_tokens: a default reservation, but never one that alone exceeds a tpm limit.
    const tpm = Math.min(...scopes.map((s) => s.limits.tpm ?? Number.POSITIVE_INFINITY));
    return Math.max(r.promptTokens, Math.min(r.promptTokens + DEFAULT_COMPLETION_RESERVATION, tpm));
  }

  private async check<T>(run: () => Promise<T>): Promise<T> {
    try {
      return await withinRedisWait(run(), this.options.ctl.redis);
    } catch (e) {
      // Without Redis there is no budget to check (and no queue to use): the usual 503.
      throw withDetail(new PlatformError(503, "queue_unavailable", "rate limits cannot be checked right now (the queue is unavailable), retry shortly", null, 1), e);
    }
  }

  private setHeaders(verdict: Verdict, set: (name: string, value: string) => void): void {
    this.reported = true;
    for (const [name, value] of rateLimitHeaders(verdict)) set(name, value);
  }
}

/**
 * The writes of requests that have ended: each one's limiter finish (release, settle) and usage.
 * Finishes are sent on the next check phase of the event loop, once the responses of this turn
 * have been written, so no response waits for them, in one pipeline for every request that ended
 * in the turn (on a Redis Cluster, whose pipelines cannot span slots, each finish on its own).
 * Usage is summed in memory and written every USAGE_FLUSH_MS in one pipeline (with the finishes
 * of that turn): a gateway that dies loses at most that long of counts, never a limit, which
 * the finishes and the admission script keep in Redis. Nothing waits for the answers either: a
 * failure is logged, and a finish that met NOSCRIPT (a Redis that lost its scripts) is sent
 * again on its own.
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
    const queued = redis.isCluster ? [] : finishes;
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

  /** The pipeline's answers: its first `finishes.length` are the finishes', the rest usage's. */
  private async checked(results: [Error | null, unknown][], finishes: Finish[]): Promise<void> {
    const again: Promise<void>[] = [];
    let usageFailed: Error | undefined;
    results.forEach(([err], i) => {
      if (!err) return;
      const f = finishes[i];
      if (f === undefined) usageFailed ??= err;
      else if (isNoScript(err)) again.push(this.limiter.end(f).catch(logged("releasing and settling a rate limit")));
      else logged("releasing and settling a rate limit")(err);
    });
    if (usageFailed) logged("recording usage")(usageFailed);
    await Promise.all(again);
  }
}

/**
 * `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` as OpenAI sends them, for the scope
 * that binds (least remaining) among those with such a limit; none for a dimension without one.
 */
export function rateLimitHeaders(verdict: Verdict): [string, string][] {
  const out: [string, string][] = [];
  const dims = [
    ["requests", (s: ScopeState) => s.scope.limits.rpm, (s: ScopeState) => s.requests],
    ["tokens", (s: ScopeState) => s.scope.limits.tpm, (s: ScopeState) => s.tokens],
  ] as const;
  for (const [dim, limitOf, usedOf] of dims) {
    let binding: { limit: number; remaining: number; reset: number } | undefined;
    for (const s of verdict.scopes) {
      const limit = limitOf(s);
      if (limit === undefined) continue;
      const remaining = Math.max(0, limit - usedOf(s));
      if (!binding || remaining < binding.remaining) binding = { limit, remaining, reset: s.reset_ms };
    }
    if (!binding) continue;
    out.push([`x-ratelimit-limit-${dim}`, String(binding.limit)], [`x-ratelimit-remaining-${dim}`, String(binding.remaining)], [`x-ratelimit-reset-${dim}`, formatReset(binding.reset)]);
  }
  return out;
}

/** A duration as OpenAI's reset headers write it (Go's form): `250ms`, `1s`, `12.5s`, `1m0s`. */
export function formatReset(ms: number): string {
  const whole = Math.max(0, Math.round(ms));
  if (whole < 1000) return `${whole}ms`;
  const minutes = Math.floor(whole / 60_000);
  const seconds = Number(((whole % 60_000) / 1000).toFixed(3));
  return minutes > 0 ? `${minutes}m${seconds}s` : `${seconds}s`;
}

const WHAT: Record<LimitKind, string> = { requests: "requests per minute", tokens: "tokens per minute", concurrency: "requests in flight" };

/** The 429, worded as OpenAI words it: which limit, its value, what was used and asked for, when to retry. */
function refusal(key: ApiKeyRecord, verdict: Verdict, tokens: number, windowMs: number): PlatformError {
  const first = verdict.exceeded[0] as { scope: Scope; kind: LimitKind };
  const state = verdict.scopes.find((s) => s.scope === first.scope) as ScopeState;
  const where = first.scope.name === "key" ? `API key ${key.id}` : `API key ${key.id} on model ${first.scope.name.slice("model:".length)}`;
  const retryAfter = Math.max(1, Math.ceil(verdict.retry_after_ms / 1000));
  if (verdict.never) {
    const tpm = first.scope.limits.tpm as number;
    return new PlatformError(
      429,
      "rate_limit_exceeded",
      `Request too large for ${where}: it needs ${tokens} tokens (prompt estimate + max_tokens) but the limit is ${tpm} tokens per minute. Lower max_tokens or shorten the prompt.`,
      "max_tokens",
      Math.ceil(windowMs / 1000),
    );
  }
  const used = first.kind === "requests" ? state.requests : first.kind === "tokens" ? state.tokens : state.in_flight;
  const limit = first.kind === "requests" ? first.scope.limits.rpm : first.kind === "tokens" ? first.scope.limits.tpm : first.scope.limits.max_concurrency;
  const requested = first.kind === "tokens" ? tokens : 1;
  return new PlatformError(
    429,
    "rate_limit_exceeded",
    `Rate limit reached for ${where} on ${WHAT[first.kind]}: limit ${limit}, used ${used}, requested ${requested}. Please try again in ${formatReset(first.kind === "concurrency" ? retryAfter * 1000 : verdict.retry_after_ms)}.`,
    null,
    retryAfter,
  );
}

const log = logger("ratelimit");

/** A failure off the response's path (its answer is already decided): logged, never thrown. */
function logged(what: string): (e: unknown) => void {
  return (e) => log.error(causeFields(e), `${what} failed: ${e instanceof Error ? e.message : String(e)}`);
}

/** The body, passed through; `onClose` runs once when it has been read to its end, failed or been cancelled (the client left). */
function untilClosed(body: ReadableStream<Uint8Array>, onClose: () => void): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    onClose();
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { done, value } = await reader.read();
        if (done) {
          close();
          controller.close();
        } else controller.enqueue(value);
      } catch (e) {
        close();
        controller.error(e);
      }
    },
    cancel(reason) {
      close();
      return reader.cancel(reason);
    },
  });
}
