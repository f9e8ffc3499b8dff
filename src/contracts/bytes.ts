/** Byte counts as people read them, in messages and on the terminal: `512 bytes`, `2 MiB`, `1.5 GiB`. */

const UNITS = ["KiB", "MiB", "GiB", "TiB"];

/** Binary units with at most one decimal (`2 MiB`, not `2.0 MiB`); plain bytes below 1 KiB. */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n} bytes`;
  let unit = 0;
  let value = n / 1024;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${Number(value.toFixed(1))} ${UNITS[unit]}`;
}
