/**
 * Users, created on their first sign-in and updated on each later one (the provider's claims may
 * move a person to another organization or role; tokens read the user at every verification, so
 * the change applies to tokens already issued). Records by id, and an index from the provider's
 * issuer and subject to the id.
 */
import { randomBytes } from "node:crypto";
import type { Role } from "../contracts/orgs.ts";
import { getOrg } from "../orgs/store.ts";
import type { Control } from "../redis/connection.ts";
import { parseStored } from "../redis/stored.ts";
import { User } from "./record.ts";

export type SignedIn = { issuer: string; subject: string; name: string; org: string; role: Role };

/** The user the provider's `issuer` and `subject` name, created or brought up to date; its organization must exist. */
export async function upsertUser(ctl: Control, who: SignedIn): Promise<User> {
  await getOrg(ctl, who.org);
  const identity = `${who.issuer}\n${who.subject}`;
  const now = Date.now();
  const candidate = `usr_${randomBytes(6).toString("hex")}`;
  // HSETNX: two first sign-ins at once make one user.
  await ctl.redis.hsetnx(ctl.keys.userByIdentity, identity, candidate);
  const id = (await ctl.redis.hget(ctl.keys.userByIdentity, identity)) as string;
  const before = await findUser(ctl, id);
  const record = User.parse({
    id,
    name: who.name,
    org: who.org,
    role: who.role,
    issuer: who.issuer,
    subject: who.subject,
    created: before?.created ?? now,
    updated: now,
  });
  await ctl.redis.hset(ctl.keys.users, id, JSON.stringify(record));
  // Gateways drop the user's cached tokens at once (the channel's format: src/keys/changes.ts).
  if (before && (before.org !== record.org || before.role !== record.role))
    await ctl.redis.publish(ctl.keys.callerEvents, `user:${id}`).catch(() => 0);
  return record;
}

export async function findUser(ctl: Control, id: string): Promise<User | undefined> {
  const raw = await ctl.redis.hget(ctl.keys.users, id);
  if (!raw) return undefined;
  const parsed = parseStored(User, raw, "user", id);
  return parsed.ok ? parsed.value : undefined;
}

/** `org`: only that organization's users (absent: all). */
export async function listUsers(ctl: Control, org?: string): Promise<User[]> {
  return Object.entries(await ctl.redis.hgetall(ctl.keys.users))
    .flatMap(([id, raw]) => {
      const parsed = parseStored(User, raw, "user", id);
      return parsed.ok && (org === undefined || parsed.value.org === org) ? [parsed.value] : [];
    })
    .sort((a, b) => a.created - b.created);
}
