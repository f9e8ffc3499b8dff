/**
 * Where a person signed in through the identity provider belongs, read from the ID token's claims
 * (docs/signin.md, "Claims"): the organization claim (`org`) and the role claim (`role`, `user` when
 * absent), or, when PLATFORM_OIDC_GROUPS_CLAIM names a group-style claim, groups named
 * `platform:<org>:<role>` (Keycloak's full paths, `/platform:<org>:<role>`, too). A person in
 * groups of several organizations, an organization id that cannot be one, or a role other than
 * admin and user is refused with a message saying which.
 */
import { ORG_ID_PATTERN, Role } from "../contracts/orgs.ts";
import type { ClaimNames } from "../settings/signin.ts";

export type Placement =
  | { ok: true; org: string; role: Role; name: string }
  /** `message`: what the person is shown (their own claims, nothing of the platform's). */
  | { ok: false; message: string };

const GROUP = /^\/?platform:([^:]+):([^:]+)$/;

/** A claim as one string: a string, or an array holding exactly one. */
function single(value: unknown): string | undefined {
  if (typeof value === "string") return value;
  if (Array.isArray(value) && value.length === 1 && typeof value[0] === "string") return value[0];
  return undefined;
}

export function placementOf(claims: Record<string, unknown>, names: ClaimNames): Placement {
  const name =
    [claims.name, claims.preferred_username, claims.email, claims.sub].find(
      (v): v is string => typeof v === "string" && v !== "",
    ) ?? "unknown";
  const fromGroups = names.groups ? groupsPlacement(claims[names.groups], names.groups) : undefined;
  if (fromGroups) return fromGroups.ok ? { ...fromGroups, name } : fromGroups;
  const org = single(claims[names.org]);
  if (org === undefined)
    return {
      ok: false,
      message: `Your identity provider's ID token has no "${names.org}" claim naming your organization${names.groups ? ` and no "${names.groups}" group of the form platform:<org>:<role>` : ""}.`,
    };
  const rawRole = claims[names.role] === undefined ? "user" : single(claims[names.role]);
  return judge(org, rawRole, `the "${names.org}" and "${names.role}" claims`, name);
}

/** The placement the platform groups give; undefined when the claim holds none, so the org and role claims decide. */
function groupsPlacement(value: unknown, claim: string): Placement | undefined {
  const groups = (Array.isArray(value) ? value : [value]).filter((g): g is string => typeof g === "string");
  const matched = groups.flatMap((g) => {
    const m = GROUP.exec(g);
    return m ? [{ org: m[1] as string, role: m[2] as string }] : [];
  });
  if (matched.length === 0) return undefined;
  const orgs = [...new Set(matched.map((m) => m.org))];
  if (orgs.length > 1)
    return {
      ok: false,
      message: `Your "${claim}" groups name several organizations (${orgs.join(", ")}); a person belongs to one here.`,
    };
  const roles = new Set(matched.map((m) => m.role));
  // Both roles in one organization: the broader one, as a person in both groups expects.
  const role = roles.has("admin") ? "admin" : roles.size === 1 ? [...roles][0] : undefined;
  return judge(orgs[0] as string, role, `the "${claim}" claim`, "");
}

function judge(org: string, role: string | undefined, source: string, name: string): Placement {
  if (!ORG_ID_PATTERN.test(org))
    return { ok: false, message: `Your organization per ${source}, "${org}", is not an organization id.` };
  const parsed = Role.safeParse(role);
  if (!parsed.success)
    return {
      ok: false,
      message: `Your role per ${source}, "${role ?? "(not one value)"}", is neither admin nor user: the platform knows those two.`,
    };
  return { ok: true, org, role: parsed.data, name };
}
