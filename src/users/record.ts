/**
 * A person who signs in through the operator's identity provider (OpenID Connect), kept minimally:
 * who the provider says they are (issuer and subject), a display name, and the organization and
 * role its claims gave at the last sign-in. CLI tokens are bound to a user by its id.
 */
import { z } from "zod";
import { OrgId, Role } from "../contracts/orgs.ts";

export const UserId = z.string().regex(/^usr_[0-9a-f]{12}$/, 'expected a user id such as "usr_0123456789ab"');

export const User = z.object({
  id: UserId,
  name: z.string().min(1).max(200),
  org: OrgId,
  role: Role,
  /** The provider's `iss` and `sub`: what identifies the person across sign-ins. */
  issuer: z.string().min(1),
  subject: z.string().min(1),
  /** Epoch milliseconds. */
  created: z.number().int(),
  updated: z.number().int(),
});
export type User = z.infer<typeof User>;
