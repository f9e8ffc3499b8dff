/**
 * Who a model name belongs to (docs/security.md, "Names an organization owns"). What the operator
 * registers is install-wide and has no owner; what an organization makes (a fine-tuning job's
 * adapter or model) is the organization's: its name lives in the organization's namespace
 * (`<org>.<suffix>`; the install's own organization keeps bare names), is claimed once for it, and
 * is listed and served only to it and the operator. Another organization is answered as if the
 * name did not exist.
 */
import { PlatformError } from "../contracts/errors.ts";
import { DEFAULT_ORG, isOperator, type Principal } from "../contracts/orgs.ts";
import type { Control } from "../redis/connection.ts";

/** Who asks, as far as names go; undefined: the platform itself (workers, the scaler, tests' direct calls). */
export type NameViewer = Pick<Principal, "org" | "role"> | undefined;

/** Whether `viewer` may see and use what `owner` made (null: the operator's, install-wide). */
export function mayUse(viewer: NameViewer, owner: string | null | undefined): boolean {
  return !owner || viewer === undefined || isOperator(viewer) || viewer.org === owner;
}

/**
 * The name a fine-tuning job of `org` registers its result under: `<org>.<suffix>` (a suffix
 * already so prefixed is taken as it is), the bare suffix for the install's own organization.
 * Organization ids hold no ".", so every organization's names are apart from every other's.
 */
export function ownedName(org: string, suffix: string): string {
  if (org === DEFAULT_ORG || suffix.startsWith(`${org}.`)) return suffix;
  return `${org}.${suffix}`;
}

/** The organization that owns `name`; null when none does (the operator's, or not registered). */
export async function ownerOf(ctl: Control, name: string): Promise<string | null> {
  return ctl.redis.hget(ctl.keys.modelOwners, name);
}

/** Every owned name and its owner (one read, for lists). */
export async function owners(ctl: Control): Promise<Map<string, string>> {
  return new Map(Object.entries(await ctl.redis.hgetall(ctl.keys.modelOwners)));
}

/** The 409 for a name someone else holds; the holder is never named to an organization. */
function taken(name: string, holder: "organization" | "operator", field: string): PlatformError {
  return new PlatformError(
    409,
    "name_taken",
    holder === "organization"
      ? `${field}: "${name}" belongs to another organization; choose another name`
      : `${field}: "${name}" is a model another organization or the operator registered; a fine-tuning result never becomes a version of a model its organization did not create: choose another suffix`,
    field,
  );
}

/**
 * Refuses (409) a name `org` may not add versions to: one another organization owns, or one with
 * versions the operator registered. Free names and `org`'s own pass. A check before work starts;
 * `claimName` is the one that holds at registration.
 */
export async function checkNameFor(ctl: Control, name: string, org: string, field = "suffix"): Promise<void> {
  const owner = await ownerOf(ctl, name);
  if (owner !== null && owner !== org) throw taken(name, "organization", field);
  if (owner === null && (await ctl.redis.exists(ctl.keys.modelVersions(name))) === 1)
    throw taken(name, "operator", field);
}

/**
 * Claims `name` for `owner` before a version is saved under it (null: the operator registers it,
 * install-wide). An organization gets a free name or its own; the operator gets any name no
 * organization owns (an organization's model never gets a version it did not make).
 */
export async function claimName(ctl: Control, name: string, owner: string | null): Promise<void> {
  if (owner === null) {
    // The operator is told whose it is.
    const holder = await ownerOf(ctl, name);
    if (holder !== null)
      throw new PlatformError(
        409,
        "name_taken",
        `name: "${name}" belongs to organization "${holder}" (a fine-tuning result); register the model under another name`,
        "name",
      );
    return;
  }
  const claimed = (await ctl.redis.hsetnx(ctl.keys.modelOwners, name, owner)) === 1;
  if (!claimed) {
    if ((await ownerOf(ctl, name)) !== owner) throw taken(name, "organization", "name");
    return;
  }
  // Versions without an owner are the operator's: the claim is undone and refused.
  if ((await ctl.redis.exists(ctl.keys.modelVersions(name))) === 1) {
    await ctl.redis.hdel(ctl.keys.modelOwners, name);
    throw taken(name, "operator", "name");
  }
}
