/**
 * The metrics section (docs/observability.md, "The metrics port"): the gateway serves Prometheus
 * metrics on a port of its own, which only the scraper needs to reach, and not on the API port,
 * where any client could read every organization's series without a key.
 */
import { z } from "zod";
import { flag } from "./parse.ts";

export const metricsShape = {
  PLATFORM_METRICS_PORT: z.coerce
    .number({ message: "expected a TCP port (0: any free port)" })
    .int("expected a TCP port (0: any free port)")
    .min(0, "expected a TCP port (0: any free port)")
    .max(65535, "expected a TCP port (0: any free port)")
    .default(9464),
  /** The old behaviour: `/metrics` on the API port too, without a key. Off unless the operator sets it. */
  PLATFORM_METRICS_ON_API_PORT: flag(false),
};

export type MetricsSettings = { port: number; onApiPort: boolean };

export function metricsSettings(e: z.infer<z.ZodObject<typeof metricsShape>>): MetricsSettings {
  return { port: e.PLATFORM_METRICS_PORT, onApiPort: e.PLATFORM_METRICS_ON_API_PORT };
}
