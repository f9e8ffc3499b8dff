/**
 * What one organization may fill (docs/security.md, "Memory, storage and traffic a tenant can
 * fill"): the largest RPC message the gateway reads or inflates, the files an organization may
 * keep (bytes and count) and how long an upload lives when it names no expiry, and how many
 * log-follow streams of one organization a gateway holds at once; the default traffic limits of
 * an organization across all its keys.
 */
import { z } from "zod";

const whole = (fallback: number, what = "a whole number") =>
  z.coerce
    .number({ message: `expected ${what}` })
    .int()
    .min(1, "expected at least 1")
    .default(fallback);

const limit = z.coerce
  .number({ message: "expected a whole number" })
  .int()
  .min(1, "expected at least 1")
  .max(1_000_000_000, "expected at most 1000000000")
  .optional();

export const tenantsShape = {
  PLATFORM_RPC_MAX_MESSAGE_BYTES: whole(4 * 1024 * 1024, "a whole number of bytes"),
  PLATFORM_ORG_FILE_BYTES: whole(10 * 1024 ** 3, "a whole number of bytes"),
  PLATFORM_ORG_FILES: whole(1000),
  /** Seconds an upload lives when it names no `expires_after`; 0: until deleted, as OpenAI keeps them. */
  PLATFORM_FILE_TTL_S: z.coerce.number({ message: "expected a whole number of seconds" }).int().min(0).default(0),
  PLATFORM_ORG_LOG_FOLLOWS: whole(8),
  /** Defaults of every organization's traffic limits across its keys (an operator sets its own per organization); unset: none. */
  PLATFORM_ORG_RPM: limit,
  PLATFORM_ORG_TPM: limit,
  PLATFORM_ORG_CONCURRENCY: limit,
};

export type TenantSettings = {
  rpcMaxMessageBytes: number;
  orgFileBytes: number;
  orgFiles: number;
  fileTtlS: number;
  orgLogFollows: number;
  /** The traffic limits of an organization that has none of its own. */
  orgLimits: { rpm?: number; tpm?: number; max_concurrency?: number };
};

export function tenantSettings(e: z.infer<z.ZodObject<typeof tenantsShape>>): TenantSettings {
  return {
    rpcMaxMessageBytes: e.PLATFORM_RPC_MAX_MESSAGE_BYTES,
    orgFileBytes: e.PLATFORM_ORG_FILE_BYTES,
    orgFiles: e.PLATFORM_ORG_FILES,
    fileTtlS: e.PLATFORM_FILE_TTL_S,
    orgLogFollows: e.PLATFORM_ORG_LOG_FOLLOWS,
    orgLimits: {
      ...(e.PLATFORM_ORG_RPM === undefined ? {} : { rpm: e.PLATFORM_ORG_RPM }),
      ...(e.PLATFORM_ORG_TPM === undefined ? {} : { tpm: e.PLATFORM_ORG_TPM }),
      ...(e.PLATFORM_ORG_CONCURRENCY === undefined ? {} : { max_concurrency: e.PLATFORM_ORG_CONCURRENCY }),
    },
  };
}
