/** The logging section: the log format and level of the long-running roles (src/telemetry/log.ts). */
import { z } from "zod";
import { LOG_LEVELS, type LoggingSettings } from "../telemetry/log.ts";
import { optional } from "./parse.ts";

export const loggingShape = {
  /** Unset: `text` for `platform up` (a person at a terminal; its workers follow it), `json` for gateway, worker and scaler. */
  PLATFORM_LOG_FORMAT: optional(z.enum(["json", "text"], { message: "expected json or text" })),
  /** `debug` adds a line per request (gateway) and per job (worker). */
  PLATFORM_LOG_LEVEL: optional(z.enum(LOG_LEVELS, { message: `expected one of ${LOG_LEVELS.join(", ")}` })),
};

export function loggingSettings(e: z.infer<z.ZodObject<typeof loggingShape>>): LoggingSettings {
  return { format: e.PLATFORM_LOG_FORMAT, level: e.PLATFORM_LOG_LEVEL ?? "info" };
}
