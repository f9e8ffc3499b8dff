/**
 * Stored responses (POST /v1/responses with `store`, docs/retention.md): how long one is kept, and
 * how many and how many bytes an organization may keep; past either, its oldest go first.
 */
import { z } from "zod";
import { positiveMs } from "./parse.ts";

const count = (fallback: number, what: string) =>
  z.coerce
    .number({ message: `expected a whole number of ${what}` })
    .int()
    .positive()
    .default(fallback);

export const responsesShape = {
  /** OpenAI keeps a stored response 30 days. */
  PLATFORM_RESPONSES_TTL_MS: positiveMs(30 * 24 * 3_600_000),
  PLATFORM_RESPONSES_MAX_PER_ORG: count(10_000, "responses"),
  PLATFORM_RESPONSES_MAX_BYTES_PER_ORG: count(256 * 1024 * 1024, "bytes"),
};

export type ResponsesSettings = { ttlMs: number; maxPerOrg: number; maxBytesPerOrg: number };

export function responsesSettings(e: z.infer<z.ZodObject<typeof responsesShape>>): ResponsesSettings {
  return {
    ttlMs: e.PLATFORM_RESPONSES_TTL_MS,
    maxPerOrg: e.PLATFORM_RESPONSES_MAX_PER_ORG,
    maxBytesPerOrg: e.PLATFORM_RESPONSES_MAX_BYTES_PER_ORG,
  };
}
