/**
 * The structured-outputs section: the bounds on the JSON schemas one request may carry (OpenAI's
 * limits by default, src/contracts/schema-limits.ts) and how long a replica may spend building one
 * schema's grammar before that request fails with `schema_too_complex` (docs/chat.md).
 */
import { z } from "zod";
import { MAX_TOOLS } from "../contracts/job.ts";
import { SCHEMA_LIMITS, type SchemaLimits } from "../contracts/schema-limits.ts";
import { positiveMs } from "./parse.ts";

/** Far longer than the largest schema the default limits allow takes (~0.2 s), far shorter than a request waits. */
export const DEFAULT_GRAMMAR_TIMEOUT_MS = 2000;

const count = (fallback: number) =>
  z.coerce.number({ message: "expected a whole number" }).int().min(1, "expected at least 1").default(fallback);

type LimitVariables = {
  [K in keyof typeof SCHEMA_LIMITS as (typeof SCHEMA_LIMITS)[K]["setting"]]: ReturnType<typeof count>;
};

export const structuredShape = {
  ...(Object.fromEntries(
    Object.values(SCHEMA_LIMITS).map((limit) => [limit.setting, count(limit.fallback)]),
  ) as LimitVariables),
  // The queue contract's own bound (job.ts): a setting may lower it, not raise it.
  [SCHEMA_LIMITS.tools.setting]: count(SCHEMA_LIMITS.tools.fallback).pipe(
    z.number().max(MAX_TOOLS, `expected at most ${MAX_TOOLS}, the queue contract's bound`),
  ),
  PLATFORM_GRAMMAR_TIMEOUT_MS: positiveMs(DEFAULT_GRAMMAR_TIMEOUT_MS),
};

export type StructuredSettings = { limits: SchemaLimits; grammarTimeoutMs: number };

export function structuredSettings(e: z.infer<z.ZodObject<typeof structuredShape>>): StructuredSettings {
  const limits = Object.fromEntries(
    Object.entries(SCHEMA_LIMITS).map(([name, limit]) => [name, e[limit.setting]]),
  ) as SchemaLimits;
  return { limits, grammarTimeoutMs: e.PLATFORM_GRAMMAR_TIMEOUT_MS };
}
