/**
 * The `x-ratelimit-*` headers a limited key's responses carry, as OpenAI sends them: for requests
 * and tokens, the limit that binds, what is left of it and when it resets.
 */
import type { ScopeState, Verdict } from "./limiter.ts";

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
    out.push(
      [`x-ratelimit-limit-${dim}`, String(binding.limit)],
      [`x-ratelimit-remaining-${dim}`, String(binding.remaining)],
      [`x-ratelimit-reset-${dim}`, formatReset(binding.reset)],
    );
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
