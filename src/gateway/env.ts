import type { Role } from "../contracts/orgs.ts";
import type { RequestMeter } from "../ratelimit/meter.ts";
import type { KeyLimits } from "../ratelimit/limits.ts";

/**
 * Who sent the request, however it authenticated (auth.ts): an API key, or a CLI token acting as
 * its key or user. `id` is what usage, rate limits and ownership (batch jobs, files) are keyed by,
 * so a token's is its subject's; `operator`: an admin of the install's own organization.
 */
export type Caller = {
  kind: "key" | "token";
  id: string;
  name: string;
  org: string;
  role: Role;
  operator: boolean;
  limits?: KeyLimits;
  /** The token's own id and when it expires (epoch ms), for a token. */
  token?: { id: string; expires: number };
};

/** Per-request values the gateway's middleware sets for the routes (`meter`: rate limits and usage, src/ratelimit/meter.ts). */
export type GatewayEnv = { Variables: { caller: Caller; requestId: string; meter?: RequestMeter } };
