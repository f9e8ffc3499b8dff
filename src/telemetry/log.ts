/**
 * The platform's logs. `json` (pino) writes one JSON object per line — level, time, pid,
 * hostname, role, component, request_id and trace_id when known, msg, err — for log
 * collectors; `text` writes the short `[component] request-id message` lines a person reads in
 * `platform up`'s terminal. Each role picks its default (src/settings/logging.ts).
 *
 * Cheap to import anywhere: pino is loaded only when a role asks for JSON, so CLI commands that
 * share modules with the roles (storage, control) start no slower. Modules take a logger at
 * import time (`logger("gateway")`), before their role has read its settings: each call uses
 * the process's configuration of the moment.
 */
import { createRequire } from "node:module";
import { hostname } from "node:os";
import type { Logger, pino as Pino } from "pino";

export const LOG_LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "silent"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export type LogFormat = "json" | "text";
/** How a role logs (src/settings/logging.ts reads it); `format` undefined: the role's default. */
export type LoggingSettings = { format: LogFormat | undefined; level: LogLevel };
export type Fields = Record<string, unknown>;
type Level = "debug" | "info" | "warn" | "error";
type Method = (fieldsOrMessage: Fields | string, message?: string) => void;
export type Log = { debug: Method; info: Method; warn: Method; error: Method; isEnabled: (level: LogLevel) => boolean };

const RANK: Record<LogLevel, number> = {
  trace: 10,
  debug: 20,
  info: 30,
  warn: 40,
  error: 50,
  fatal: 60,
  silent: Infinity,
};

/** Until a role configures it: text at info, as console.log/console.error wrote. */
let format: LogFormat = "text";
let threshold = RANK.info;
let root: Logger | undefined;
let generation = 0;
/** Trace fields for the line being written (src/telemetry/tracing.ts sets this while tracing is on). */
let traceFields: (() => Fields | undefined) | undefined;

/** Configure this process's logs from its settings; `defaultFormat` is the role's (json, or text for `up`). */
export function configureLogging(
  settings: LoggingSettings,
  options: { role: string; defaultFormat: LogFormat },
): LogFormat {
  format = settings.format ?? options.defaultFormat;
  threshold = RANK[settings.level];
  root = format === "json" ? jsonLogger(settings.level, options.role) : undefined;
  generation++;
  return format;
}

/** A component's logger (`[component]` in text; `"component"` in JSON). */
export function logger(component: string): Log {
  let boundTo = -1;
  let child: Logger | undefined;
  const json = (r: Logger) => {
    if (boundTo !== generation) {
      child = r.child({ component });
      boundTo = generation;
    }
    return child as Logger;
  };
  const method =
    (level: Level): Method =>
    (fieldsOrMessage, message) => {
      if (RANK[level] < threshold) return;
      const fields = typeof fieldsOrMessage === "string" ? undefined : fieldsOrMessage;
      const msg = typeof fieldsOrMessage === "string" ? fieldsOrMessage : (message ?? "");
      if (root) json(root)[level](fields ?? {}, msg);
      else writeText(level, { component, ...fields, msg });
    };
  return {
    debug: method("debug"),
    info: method("info"),
    warn: method("warn"),
    error: method("error"),
    isEnabled: (level) => RANK[level] >= threshold,
  };
}

/**
 * A line in the old `[component] message` form (the scaler's and backends' callbacks produce
 * these): the bracket becomes the component, so JSON gets a field and text reads as before.
 */
export function logLine(line: string, level: Level = "info"): void {
  const m = /^\[([\w.@-]+)\] ([\s\S]*)$/.exec(line);
  const log = m ? logger(m[1] as string) : fallback;
  log[level](m ? (m[2] as string) : line);
}
const fallback = logger("platform");

/** A failure's cause as log fields: an Error under `err` (message and stack), anything else as `detail`. */
export function causeFields(cause: unknown): Fields {
  return cause instanceof Error ? { err: cause } : { detail: typeof cause === "string" ? cause : String(cause) };
}

/** Where trace ids come from while tracing is on (undefined: off). */
export function setTraceFields(source: (() => Fields | undefined) | undefined): void {
  traceFields = source;
}

function jsonLogger(level: LogLevel, role: string): Logger {
  const pino = createRequire(import.meta.url)("pino") as typeof Pino;
  return pino(
    {
      level,
      base: { pid: process.pid, hostname: hostname(), role },
      timestamp: pino.stdTimeFunctions.isoTime,
      // Level names, not pino's numbers: a collector's query reads `level="error"`.
      formatters: { level: (label) => ({ level: label }) },
      mixin: () => traceFields?.() ?? {},
    },
    // process.stdout, not pino's own file descriptor writer: lines stay in order with the few
    // plain lines a role prints (`up`'s banner), and a line logged just before exit is written.
    tolerant(process.stdout),
  );
}

/** Warnings and errors go to stderr, the rest to stdout, as console.error and console.log did. */
function writeText(level: Level, o: Fields): void {
  tolerant(level === "warn" || level === "error" ? process.stderr : process.stdout).write(`${formatText(o)}\n`);
}

/**
 * A stream whose write errors are ignored, as console's are. A worker `up` started writes into a
 * pipe that `up` reads; when `up` is killed outright the pipe breaks, and an unhandled EPIPE
 * would kill the worker before it hands its jobs back.
 */
function tolerant(stream: NodeJS.WriteStream): NodeJS.WriteStream {
  if (!tolerated.has(stream)) {
    stream.on("error", () => undefined);
    tolerated.add(stream);
  }
  return stream;
}
const tolerated = new WeakSet<NodeJS.WriteStream>();

/** `[component] request-id message: detail: error`, the shape the platform's lines always had. */
export function formatText(o: Fields): string {
  const parts = [
    o.component ? `[${String(o.component)}] ` : "",
    o.request_id ? `${String(o.request_id)} ` : "",
    String(o.msg ?? ""),
  ];
  if (o.detail !== undefined) parts.push(`: ${typeof o.detail === "string" ? o.detail : JSON.stringify(o.detail)}`);
  const err = o.err as { stack?: string; message?: string } | undefined;
  if (err !== undefined)
    parts.push(
      `: ${err instanceof Error ? (err.stack ?? err.message) : typeof err === "object" && err ? (err.stack ?? err.message ?? JSON.stringify(err)) : String(err)}`,
    );
  return parts.join("");
}
