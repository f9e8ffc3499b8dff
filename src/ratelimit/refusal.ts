/**
 * The 429 of a request a rate limit refused, worded as OpenAI words it: which limit, its value,
 * what was used and asked for, and when to retry (or, for a request too large for any minute,
 * what to change).
 */
import { PlatformError } from "../contracts/errors.ts";
import { formatReset } from "./headers.ts";
import type { LimitKind, Scope, ScopeState, Verdict } from "./limiter.ts";
import type { Reservation } from "./reservation.ts";

const WHAT: Record<LimitKind, string> = {
  requests: "requests per minute",
  tokens: "tokens per minute",
  concurrency: "requests in flight",
};

/** `verdict` refused a request (`reservation`, of `tokens` reserved) through API key `keyId` (or organization "org:<id>"). */
export function refusal(
  keyId: string,
  verdict: Verdict,
  reservation: Reservation,
  tokens: number,
  windowMs: number,
): PlatformError {
  const first = verdict.exceeded[0] as { scope: Scope; kind: LimitKind };
  const state = verdict.scopes.find((s) => s.scope === first.scope) as ScopeState;
  const where = (scope: Scope) =>
    scope.name === "org"
      ? `organization ${keyId.slice("org:".length)} (all its keys; set by the operator)`
      : scope.name === "key"
        ? `API key ${keyId}`
        : `API key ${keyId} on model ${scope.name.slice("model:".length)}`;
  const retryAfter = Math.max(1, Math.ceil(verdict.retry_after_ms / 1000));
  const requests = reservation.requests ?? 1;
  // More images in one request than a minute admits: no wait helps.
  const tooMany = verdict.exceeded.find((e) => e.kind === "requests" && requests > (e.scope.limits.rpm ?? Infinity));
  if (verdict.never && tooMany) {
    return new PlatformError(
      429,
      "rate_limit_exceeded",
      `Request too large for ${where(tooMany.scope)}: it asks for ${requests} images, each counted as a request, but the limit is ${tooMany.scope.limits.rpm} requests per minute. Ask for fewer images (n).`,
      "n",
      Math.ceil(windowMs / 1000),
    );
  }
  if (verdict.never) {
    const tpm = first.scope.limits.tpm as number;
    return new PlatformError(
      429,
      "rate_limit_exceeded",
      `Request too large for ${where(first.scope)}: it needs ${tokens} tokens (prompt estimate + max_tokens) but the limit is ${tpm} tokens per minute. Lower max_tokens or shorten the prompt.`,
      "max_tokens",
      Math.ceil(windowMs / 1000),
    );
  }
  const used = first.kind === "requests" ? state.requests : first.kind === "tokens" ? state.tokens : state.in_flight;
  const limit =
    first.kind === "requests"
      ? first.scope.limits.rpm
      : first.kind === "tokens"
        ? first.scope.limits.tpm
        : first.scope.limits.max_concurrency;
  const requested = first.kind === "tokens" ? tokens : first.kind === "requests" ? requests : 1;
  return new PlatformError(
    429,
    "rate_limit_exceeded",
    `Rate limit reached for ${where(first.scope)} on ${WHAT[first.kind]}: limit ${limit}, used ${used}, requested ${requested}. Please try again in ${formatReset(first.kind === "concurrency" ? retryAfter * 1000 : verdict.retry_after_ms)}.`,
    null,
    retryAfter,
  );
}
