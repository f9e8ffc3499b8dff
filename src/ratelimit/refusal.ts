/**
 * The 429 of a request a rate limit refused, worded as OpenAI words it: which limit, its value,
 * what was used and asked for, and when to retry (or, for a request too large for any minute,
 * what to change).
 */
import { PlatformError } from "../contracts/errors.ts";
import { formatReset } from "./headers.ts";
import type { LimitKind, Scope, ScopeState, Verdict } from "./limiter.ts";

const WHAT: Record<LimitKind, string> = {
  requests: "requests per minute",
  tokens: "tokens per minute",
  concurrency: "requests in flight",
};

/** `verdict` refused a request of `tokens` through API key `keyId`. */
export function refusal(keyId: string, verdict: Verdict, tokens: number, windowMs: number): PlatformError {
  const first = verdict.exceeded[0] as { scope: Scope; kind: LimitKind };
  const state = verdict.scopes.find((s) => s.scope === first.scope) as ScopeState;
  const where =
    first.scope.name === "key"
      ? `API key ${keyId}`
      : `API key ${keyId} on model ${first.scope.name.slice("model:".length)}`;
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
  const limit =
    first.kind === "requests"
      ? first.scope.limits.rpm
      : first.kind === "tokens"
        ? first.scope.limits.tpm
        : first.scope.limits.max_concurrency;
  const requested = first.kind === "tokens" ? tokens : 1;
  return new PlatformError(
    429,
    "rate_limit_exceeded",
    `Rate limit reached for ${where} on ${WHAT[first.kind]}: limit ${limit}, used ${used}, requested ${requested}. Please try again in ${formatReset(first.kind === "concurrency" ? retryAfter * 1000 : verdict.retry_after_ms)}.`,
    null,
    retryAfter,
  );
}
