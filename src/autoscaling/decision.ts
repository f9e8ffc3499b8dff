/**
 * What the scaler decided, as recorded with its inputs and reason, and the status view of an
 * endpoint's autoscaling built from them (store.ts reads both from Redis). Types and schemas
 * only, so the CLI and the browser dashboard take them as the API answers them.
 */
import { z } from "zod";
import type { QueueDepth } from "../endpoints/record.ts";
import type { autoscalingDocument } from "./config.ts";

export const RecordedDecision = z.object({
  /** When this decision was made (ms since the epoch). */
  at: z.number(),
  /** When the first of a run of identical holds was made; equals `at` otherwise. */
  since: z.number(),
  /** How many ticks in a row made this same hold (1 for actions). */
  repeats: z.number().int(),
  action: z.enum(["scale_up", "scale_down", "hold"]),
  from: z.number().int(),
  to: z.number().int(),
  needed: z.number().int(),
  reason: z.string(),
  /** The observation the decision was made on. */
  inputs: z.object({ waiting: z.number(), active: z.number(), ready: z.number(), current: z.number() }),
  /** The scaler (lease holder id) that made it. */
  holder: z.string(),
});
export type RecordedDecision = z.infer<typeof RecordedDecision>;

export type AutoscalingStatus = {
  endpoint: string;
  /** False when no autoscaling settings were ever applied to the endpoint. */
  configured: boolean;
  enabled: boolean;
  /** The settings in document form (paste into a file), null when not configured or unreadable. */
  config: ReturnType<typeof autoscalingDocument> | null;
  /** Why the stored settings cannot be used (the endpoint is then not autoscaled); null when they can. */
  error: string | null;
  /** current: replicas running (starting or ready); desired: replicas wanted now; needed: what the last decision's load called for. */
  replicas: { current: number; desired: number; ready: number; needed: number | null };
  queue: QueueDepth;
  /** Time left before each rule lets the scaler act; scale_down_delay_ms is null while demand is not low. */
  waits: { scale_up_cooldown_ms: number; scale_down_cooldown_ms: number; scale_down_delay_ms: number | null } | null;
  /** Newest first. */
  decisions: RecordedDecision[];
  /** The scaler holding the lease, null when none runs. */
  scaler: { holder: string | null };
};
