/**
 * Structured JSON logs on stdout (pino): one object a line, which the platform's log collection and
 * `platform dev-center logs` read as they are. No pretty-printing in the service: pipe through
 * `npx pino-pretty` locally if you want it.
 */
import { pino, type Logger } from "pino";

export type { Logger };

export function createLogger(level: string): Logger {
  return pino({
    level,
    base: { service: "{{name}}" },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  });
}
