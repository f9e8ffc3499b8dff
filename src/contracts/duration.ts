/**
 * Durations as the configuration files write them: `<n>s`, and also `<n>ms` and `<n>m`.
 * A bare number is rejected because its unit would be a guess.
 */
import { z } from "zod";

const DURATION_PATTERN = /^(\d+(?:\.\d+)?)(ms|s|m)$/;
const UNIT_MS = { ms: 1, s: 1_000, m: 60_000 } as const;
export const DURATION_ERROR = 'expected "<n>s" (also <n>ms, <n>m)';

/** `"30s"` → 30000; `undefined` when the text is not a duration. */
export function parseDuration(text: string): number | undefined {
  const match = DURATION_PATTERN.exec(text.trim());
  if (!match) return undefined;
  const ms = Math.round(Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS]);
  return Number.isSafeInteger(ms) ? ms : undefined;
}

/** The inverse of parseDuration, in the largest unit that is exact: 300000 → "5m". */
export function formatDuration(ms: number): string {
  if (ms >= 60_000 && ms % 60_000 === 0) return `${ms / 60_000}m`;
  if (ms % 1_000 === 0) return `${ms / 1_000}s`;
  return `${ms}ms`;
}

/** A duration string in a document, parsed to milliseconds. */
export const Duration = z.string({ error: DURATION_ERROR }).transform((text, ctx) => {
  const ms = parseDuration(text);
  if (ms === undefined) {
    ctx.addIssue({ code: "custom", message: DURATION_ERROR });
    return z.NEVER;
  }
  return ms;
});
