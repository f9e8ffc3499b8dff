/** Number and duration flags of the dev-center commands, checked before anything is sent (exit 2). */
import { DURATION_ERROR, formatDuration, parseDuration } from "../../contracts/duration.ts";
import { CliError } from "../errors.ts";

/** An integer flag within [min, max]. */
export function integerFlag(flag: string, text: string, min: number, max: number): number {
  const n = Number(text);
  if (!/^\s*\d+\s*$/.test(text) || !Number.isSafeInteger(n) || n < min || n > max)
    throw new CliError(`${flag}: expected a whole number from ${min} to ${max}, got "${text}"`, 2);
  return n;
}

/**
 * `--since 10m`: the platform's durations (`<n>ms|s|m`, src/contracts/duration.ts) and, since logs
 * are often wanted from hours back, `<n>h`; sent in the platform's own form (`2h` → `120m`).
 */
export function sinceFlag(text: string): string {
  const hours = /^\s*(\d+(?:\.\d+)?)h\s*$/.exec(text);
  const ms = hours ? Math.round(Number(hours[1]) * 3_600_000) : parseDuration(text);
  if (ms === undefined || ms <= 0 || !Number.isSafeInteger(ms))
    throw new CliError(`--since: ${DURATION_ERROR.replace(")", ", <n>h)")}, got "${text}"`, 2);
  return formatDuration(ms);
}
