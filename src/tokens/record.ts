/**
 * CLI tokens: the platform's own bearer tokens (not an identity provider's), each bound to a
 * subject (an API key, or a user who signed in through the identity provider), its organization
 * and role. A token is one sign-in session: a short-lived access token (`pt_…`) and a refresh
 * token (`ptr_…`) that trades itself for a new pair until the session ends. Both are 256 random
 * bits; Redis keeps only their SHA-256, as for API keys.
 */
import { z } from "zod";
import { OrgId, Role } from "../contracts/orgs.ts";

export const ACCESS_PREFIX = "pt_";
export const REFRESH_PREFIX = "ptr_";

/** A session's id, stable across refreshes: what listings show and revocation names. */
export const TokenId = z
  .string()
  .regex(/^tok_[0-9a-f]{16}$/, 'expected a token id such as "tok_0123456789abcdef" (GET /admin/v1/tokens lists them)');

/** What a token acts as: an API key (its id is the key's) or a signed-in user (src/users/). */
export const TokenSubject = z.object({ kind: z.enum(["key", "user"]), id: z.string().min(1) });
export type TokenSubject = z.infer<typeof TokenSubject>;

/** A session as listings show it; times are epoch milliseconds. */
export const TokenRecord = z.object({
  id: TokenId,
  subject: TokenSubject,
  /** The subject's name when the token was issued. */
  name: z.string(),
  org: OrgId,
  role: Role,
  created: z.number().int(),
  /** When the current access token stops working (a refresh moves it on). */
  expires: z.number().int(),
  /** When the session ends: no refresh past it. */
  refresh_expires: z.number().int(),
  refreshed: z.number().int().nonnegative(),
});
export type TokenRecord = z.infer<typeof TokenRecord>;

/** What issuing or refreshing hands the client: shown once, never stored. */
export type TokenGrant = {
  id: string;
  token: string;
  refresh_token: string;
  expires: number;
  refresh_expires: number;
};

/** A bearer that is meant as a CLI token (an access token; a refresh token sent as one never verifies). */
export function isCliToken(bearer: string): boolean {
  return bearer.startsWith(ACCESS_PREFIX) || bearer.startsWith(REFRESH_PREFIX);
}
