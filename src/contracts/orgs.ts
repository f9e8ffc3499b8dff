/**
 * Organizations and roles as every boundary judges them (the gateway, batch jobs, files, usage,
 * storage areas): the id form, the install's own organization, and who may see what. Here, below
 * the layers that judge, so storage and batch records need not import the store (src/orgs/).
 */
import { z } from "zod";

/**
 * The install's own organization: every key made before organizations existed, `platform up`'s
 * admin key and the bootstrap key belong to it. Its admins are the platform's operators.
 */
export const DEFAULT_ORG = "default";

/** A DNS label (RFC 1123): 1-63 lowercase letters, digits and "-", neither first nor last. */
export const ORG_ID_PATTERN = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
export const ORG_ID_ERROR =
  'expected an organization id like "acme" or "team-42": 1-63 lowercase letters, digits and "-", starting and ending with a letter or digit';
export const OrgId = z.string().regex(ORG_ID_PATTERN, ORG_ID_ERROR);

export const Role = z.enum(["admin", "user"]);
export type Role = z.infer<typeof Role>;

/** Who asks: an API key, or a token's user or key (its id is what ownership is recorded by). */
export type Principal = { id: string; org: string; role: Role };

/**
 * An admin of the install's own organization: creates organizations, keys in any of them, and
 * manages what the install shares (models, endpoints). Every admin key made before organizations
 * existed is one, so it keeps working as it did (docs/security.md, "Organizations").
 */
export function isOperator(who: Pick<Principal, "org" | "role">): boolean {
  return who.org === DEFAULT_ORG && who.role === "admin";
}

/**
 * Whether `who` may see something `owner` made in `org`: its owner, an admin of that organization,
 * an operator. Anything else is answered as if it did not exist (404), so nothing leaks.
 */
export function canSee(who: Principal, owner: { id: string | null; org: string }): boolean {
  if (isOperator(who)) return true;
  if (owner.org !== who.org) return false;
  return who.role === "admin" || owner.id === who.id;
}
