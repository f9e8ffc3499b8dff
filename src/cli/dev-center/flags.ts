/** The dev-center's `--since` flag, a commander `argParser` (number flags: src/cli/common/flags.ts). */
import { InvalidArgumentError } from "commander";
import { DURATION_ERROR, formatDuration, parseDuration } from "../../contracts/duration.ts";

/**
 * `--since 10m`: the platform's durations (`<n>ms|s|m`, src/contracts/duration.ts) and, since logs
 * are often wanted from hours back, `<n>h`; sent in the platform's own form (`2h` → `120m`).
 */
export function sinceFlag(text: string): string {
  const hours = /^\s*(\d+(?:\.\d+)?)h\s*$/.exec(text);
  const ms = hours ? Math.round(Number(hours[1]) * 3_600_000) : parseDuration(text);
  if (ms === undefined || ms <= 0 || !Number.isSafeInteger(ms))
    throw new InvalidArgumentError(DURATION_ERROR.replace(")", ", <n>h)"));
  return formatDuration(ms);
}
