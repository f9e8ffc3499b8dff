/**
 * Captures what this process logs while a test runs: the platform's logger (text format here,
 * src/telemetry/log.ts) writes errors to stderr and the rest to stdout; code that still calls
 * console.error is caught too. `text()` is everything captured, one entry per line.
 */
import { vi } from "vitest";

export function captureLogs(): { text: () => string; restore: () => void } {
  const lines: string[] = [];
  const keep = (chunk: unknown) => {
    lines.push(String(chunk).replace(/\n$/, ""));
    return true;
  };
  const spies = [
    vi.spyOn(process.stderr, "write").mockImplementation(keep),
    vi.spyOn(process.stdout, "write").mockImplementation(keep),
    vi.spyOn(console, "error").mockImplementation((...args: unknown[]) => {
      keep(args.map((a) => (a instanceof Error ? `${a.name}: ${a.message}` : String(a))).join(" "));
    }),
  ];
  return {
    text: () => lines.join("\n"),
    restore: () => {
      for (const s of spies) s.mockRestore();
    },
  };
}
