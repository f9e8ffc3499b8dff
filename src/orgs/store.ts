/**
 * Organizations: one hash of records, written by operators (`platform orgs create`). The install's
 * own organization, `default`, is never stored: it always exists, so an install that predates
 * organizations needs no migration.
 */
import { PlatformError } from "../contracts/errors.ts";
import { DEFAULT_ORG } from "../contracts/orgs.ts";
import type { Control } from "../redis/connection.ts";
import { parseStored } from "../redis/stored.ts";
import { Org } from "./record.ts";

const DEFAULT: Org = { id: DEFAULT_ORG, name: "the install's own organization", created: 0 };

export async function createOrg(ctl: Control, id: string, name?: string): Promise<Org> {
  const record = Org.parse({ id, name: name ?? id, created: Math.floor(Date.now() / 1000) });
  const created = id !== DEFAULT_ORG && (await ctl.redis.hsetnx(ctl.keys.orgs, id, JSON.stringify(record))) === 1;
  if (!created)
    throw new PlatformError(
      409,
      "org_exists",
      `organization "${id}" already exists; \`platform orgs list\` shows them`,
      "id",
    );
  return record;
}

/** The organization, or a 404 that reads the same whether it does not exist or the caller may not see it. */
export async function getOrg(ctl: Control, id: string): Promise<Org> {
  const found = await findOrg(ctl, id);
  if (!found)
    throw new PlatformError(
      404,
      "org_not_found",
      `no organization "${id}"; an operator creates it with \`platform orgs create ${id}\``,
      "id",
    );
  return found;
}

export async function findOrg(ctl: Control, id: string): Promise<Org | undefined> {
  if (id === DEFAULT_ORG) return DEFAULT;
  const raw = await ctl.redis.hget(ctl.keys.orgs, id);
  if (!raw) return undefined;
  const parsed = parseStored(Org, raw, "org", id);
  return parsed.ok ? parsed.value : undefined;
}

/** Every organization, the install's own first, then by creation. */
export async function listOrgs(ctl: Control): Promise<Org[]> {
  const stored = Object.entries(await ctl.redis.hgetall(ctl.keys.orgs)).flatMap(([id, raw]) => {
    const parsed = parseStored(Org, raw, "org", id);
    return parsed.ok ? [parsed.value] : [];
  });
  return [DEFAULT, ...stored.sort((a, b) => a.created - b.created || a.id.localeCompare(b.id))];
}
