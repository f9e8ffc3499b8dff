/** An API key as stored: its hash (never the key), organization, role and rate limits. */
import { z } from "zod";
import { DEFAULT_ORG, OrgId, Role } from "../contracts/orgs.ts";
import { KeyLimits } from "../ratelimit/limits.ts";

export const ApiKeyRole = Role;
export type ApiKeyRole = Role;

export const ApiKey = z.object({
  id: z.string(),
  name: z.string(),
  /** Records made before organizations existed have none: they belong to the install's own. */
  org: OrgId.default(DEFAULT_ORG),
  role: ApiKeyRole,
  /** First characters of the key, so a user can tell keys apart in listings. */
  prefix: z.string(),
  hash: z.string(),
  created: z.number().int(),
  /** Rate limits (src/ratelimit/limits.ts); absent: none. */
  limits: KeyLimits.optional(),
});
export type ApiKey = z.infer<typeof ApiKey>;
