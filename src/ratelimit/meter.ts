/**
 * A request's meter: its admission against the API key's rate limits (once routing knows the
 * model and version serving it), the worker's usage when it arrives, and its end (slots
 * released, tokens settled, usage counted) when the response has been sent, failed or been
 * abandoned. The gateway's middleware (src/gateway/ratelimit.ts) gives each /v1 request one.
 *
 * A key without limits costs no Redis round trip here: its meter only counts usage. A limited
 * key costs one script at admission, the only write a request waits for, unless its limits are
 * large enough for the gateway to hold part of them ahead (allowances.ts). Its end is written
 * after the response has gone out (settlements.ts). A limited key's other responses (listings,
 * errors before admission) carry the `x-ratelimit-*` headers from one read-only check.
 * docs/traffic.md has the details.
 */
import type { Usage } from "../contracts/job.ts";
import { PlatformError, withDetail } from "../contracts/errors.ts";
import type { Control } from "../redis/connection.ts";
import { withinRedisWait } from "../redis/wait.ts";
import { causeFields, logger } from "../telemetry/log.ts";
import { Allowances, type Ticket } from "./allowances.ts";
import { rateLimitHeaders } from "./headers.ts";
import { type Finish, type LimitKind, type RateLimiter, type Scope, scopesFor, type Verdict } from "./limiter.ts";
import { hasLimits, type KeyLimits, type ScopeLimits } from "./limits.ts";
import { orgLimiterId } from "./org-limits.ts";
import { refusal } from "./refusal.ts";
import { type Reservation, reservedTokens } from "./reservation.ts";
import { Settlements } from "./settlements.ts";

const log = logger("ratelimit");

export type MeterOptions = {
  ctl: Control;
  limiter: RateLimiter;
  /** The limits in force for an organization across all its keys (org-limits.ts); none: no such limits. */
  orgLimits?: (org: string) => Promise<ScopeLimits | undefined>;
  /** A refusal, for metrics: the model and version it was for and the limit that refused it. */
  onReject?: (target: { model: string; version: string }, kind: LimitKind) => void;
};

/** The API key a request came with, as far as its meter reads it; `org`: its organization. */
export type MeteredKey = { id: string; org?: string; limits?: KeyLimits | undefined };

/** Where a meter meets its request: a header put on the response, and the client leaving before it has been sent. */
export type MeteredResponse = {
  header: (name: string, value: string) => void;
  onClientGone: (fn: () => void) => void;
};

/**
 * A gateway's meters and what they share: the limiter, the budget held ahead and the writes of
 * requests that have ended. `close` gives back the budget held ahead, then drains (the gateway
 * awaits it when it closes, so no release, settlement or usage is lost at shutdown).
 */
export class RequestMeters {
  private readonly options: MeterOptions;
  private readonly settlements: Settlements;
  private readonly allowances: Allowances;

  constructor(options: MeterOptions) {
    this.options = options;
    this.settlements = new Settlements(options.ctl, options.limiter);
    this.allowances = new Allowances(options.limiter);
  }

  /** A meter for a request that came with `key`. */
  open(key: MeteredKey, response: MeteredResponse): RequestMeter {
    return new RequestMeter(
      this.options,
      { settlements: this.settlements, allowances: this.allowances },
      key,
      response,
    );
  }

  /** Resolves once the writes of every request that has ended are done. */
  drain(): Promise<void> {
    return this.settlements.drain();
  }

  async close(): Promise<void> {
    await this.allowances.close();
    await this.settlements.drain();
  }
}

/** One request's admission, usage and end. Every method but `admit` is cheap and never throws. */
export class RequestMeter {
  private readonly options: MeterOptions;
  private readonly settlements: Settlements;
  private readonly allowances: Allowances;
  private readonly key: MeteredKey;
  private readonly response: MeteredResponse;
  /** The request's entry in the limiter (when limits apply), minted by the gateway: never the caller's x-request-id, which a client could repeat. */
  private ticket: Ticket | undefined;
  private target: { model: string; version: string } | undefined;
  private scopes: Scope[] = [];
  /** The organization's admission, when it has limits: its limiter id, scope and ticket. */
  private org: { id: string; scopes: Scope[]; ticket: Ticket } | undefined;
  private reported = false;
  private usage:
    | Pick<Usage, "prompt_tokens" | "completion_tokens" | "images" | "steps" | "prompt_tokens_details">
    | undefined;
  private failed = false;
  private ended = false;

  constructor(
    options: MeterOptions,
    shared: { settlements: Settlements; allowances: Allowances },
    key: MeteredKey,
    response: MeteredResponse,
  ) {
    this.options = options;
    this.settlements = shared.settlements;
    this.allowances = shared.allowances;
    this.key = key;
    this.response = response;
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
  /**
   * `usageModel`: the name usage is recorded under when it is not the model's (an adapter's
   * `<endpoint>:<adapter>`); the key's limits are the model's either way.
   */
  async admit(
    limited: { model: string; version: string; usageModel?: string },
    reservation: Reservation,
  ): Promise<void> {
    const target = { model: limited.usageModel ?? limited.model, version: limited.version };
    const scopes = scopesFor(this.key.limits, limited.model);
    const orgLimits = this.key.org === undefined ? undefined : await this.check(() => this.orgLimitsOf());
    if (scopes.length > 0) {
      const ticket = await this.check(() =>
        this.allowances.admit(this.key.id, scopes, reservedTokens(scopes, reservation), reservation.requests),
      );
      const verdict = ticket.verdict;
      this.setHeaders(verdict, this.response.header);
      if (!verdict.admitted) this.refuse(target, this.key.id, scopes, verdict, reservation);
      this.scopes = scopes;
      this.ticket = ticket;
    }
    if (orgLimits) {
      // Across every key of the organization: its own state, admitted after the key's (given back if refused).
      const id = orgLimiterId(this.key.org as string);
      const orgScopes: Scope[] = [{ name: "org", limits: orgLimits }];
      const ticket = await this.check(() =>
        this.allowances.admit(id, orgScopes, reservedTokens(orgScopes, reservation), reservation.requests),
      );
      if (!ticket.verdict.admitted) {
        if (this.ticket) {
          const undo = { keyId: this.key.id, scopes: this.scopes, ...this.allowances.finishOf(this.ticket, 0) };
          this.ticket = undefined;
          this.settlements.add(undo, { key: this.key.id, ...target });
        }
        this.refuse(target, id, orgScopes, ticket.verdict, reservation);
      }
      this.org = { id, scopes: orgScopes, ticket };
    }
    // A client that leaves frees its slot at once, not when the abandoned work ends.
    if (this.ticket || this.org) this.response.onClientGone(() => this.end({ disconnected: true }));
    this.target = target;
  }

  private orgLimitsOf(): Promise<ScopeLimits | undefined> {
    return this.options.orgLimits?.(this.key.org as string) ?? Promise.resolve(undefined);
  }

  private refuse(
    target: { model: string; version: string },
    limiterId: string,
    scopes: Scope[],
    verdict: Verdict,
    reservation: Reservation,
  ): never {
    const first = verdict.exceeded[0];
    this.options.onReject?.(target, first?.kind ?? "requests");
    this.settlements.add(undefined, { key: this.key.id, ...target, rate_limited: 1 });
    throw refusal(limiterId, verdict, reservation, reservedTokens(scopes, reservation), this.options.limiter.windowMs);
  }

  /** The worker's count for the request: settles its tokens and is what usage records. */
  complete(
    usage: Pick<Usage, "prompt_tokens" | "completion_tokens" | "images" | "steps" | "prompt_tokens_details">,
  ): void {
    this.usage = usage;
    // Arrived after the client left: the reservation kept then is corrected now.
    if (this.ended && this.target) {
      const total = usage.prompt_tokens + usage.completion_tokens;
      const member = this.ticket?.member;
      const settle =
        member !== undefined && this.scopes.some((s) => s.limits.tpm !== undefined)
          ? { keyId: this.key.id, scopes: this.scopes, member, actual: total, release: false }
          : undefined;
      const org = this.org;
      if (org?.scopes.some((s) => s.limits.tpm !== undefined))
        this.settlements.add(
          { keyId: org.id, scopes: org.scopes, member: org.ticket.member, actual: total, release: false },
          { key: this.key.id, ...this.target },
        );
      this.settlements.add(settle, {
        key: this.key.id,
        ...this.target,
        prompt_tokens: usage.prompt_tokens,
        cached_tokens: usage.prompt_tokens_details?.cached_tokens,
        completion_tokens: usage.completion_tokens,
        images: usage.images,
        steps: usage.steps,
      });
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
    if (this.ticket) {
      const actual = this.actualOf(errored, how);
      finish = { keyId: this.key.id, scopes: this.scopes, ...this.allowances.finishOf(this.ticket, actual) };
    }
    if (this.org) {
      const { id, scopes, ticket } = this.org;
      this.settlements.add(
        { keyId: id, scopes, ...this.allowances.finishOf(ticket, this.actualOf(errored, how)) },
        {
          key: this.key.id,
          ...this.target,
        },
      );
    }
    this.settlements.add(finish, {
      key: this.key.id,
      ...this.target,
      requests: 1,
      prompt_tokens: this.usage?.prompt_tokens,
      cached_tokens: this.usage?.prompt_tokens_details?.cached_tokens,
      completion_tokens: this.usage?.completion_tokens,
      images: this.usage?.images,
      steps: this.usage?.steps,
      errors: errored ? 1 : 0,
    });
  }

  /** The tokens a request's end settles to: the worker's count; 0 for an error before any output; else the reservation stands. */
  private actualOf(errored: boolean, how: { streamed?: boolean }): number | undefined {
    if (this.usage) return this.usage.prompt_tokens + this.usage.completion_tokens;
    return errored && !how.streamed ? 0 : undefined;
  }

  /**
   * The headers for a limited key's response that admitted nothing: the key's own scope, read
   * only. `set` puts one on the response the route returned.
   */
  async peekHeaders(set: (name: string, value: string) => void): Promise<void> {
    this.reported = true;
    const scopes = scopesFor(this.key.limits);
    if (scopes.length === 0) return;
    try {
      const verdict = await withinRedisWait(this.options.limiter.peek(this.key.id, scopes), this.options.ctl.redis);
      this.setHeaders(verdict, set);
    } catch (e) {
      // The response itself is fine: it goes without the headers.
      log.error(causeFields(e), `reading rate-limit state failed: ${e instanceof Error ? e.message : String(e)}`);
    }
  }

  private async check<T>(run: () => Promise<T>): Promise<T> {
    try {
      return await withinRedisWait(run(), this.options.ctl.redis);
    } catch (e) {
      // Without Redis there is no budget to check (and no queue to use): the usual 503.
      throw withDetail(
        new PlatformError(
          503,
          "queue_unavailable",
          "rate limits cannot be checked right now (the queue is unavailable), retry shortly",
          null,
          1,
        ),
        e,
      );
    }
  }

  private setHeaders(verdict: Verdict, set: (name: string, value: string) => void): void {
    this.reported = true;
    for (const [name, value] of rateLimitHeaders(verdict)) set(name, value);
  }
}
