/**
 * The device authorization grant (RFC 8628), for a CLI on a machine without a browser: a device
 * code the CLI polls with (256 random bits) and a short user code a person types into the gateway's
 * page elsewhere. Redis keeps the device code by SHA-256 and the user code by SHA-256 too, for the
 * code's 10 minutes (the record a minute longer, so a late poll hears `expired_token` rather than
 * an unknown code). A poll sooner than the interval gets `slow_down` and a longer interval.
 */
import { hashSecret } from "../keys/store.ts";
import type { Control } from "../redis/connection.ts";
import { LuaScript } from "../redis/scripts.ts";
import type { TokenLifetimes } from "../tokens/store.ts";
import type { TokenGrant, TokenRecord, TokenSubject } from "../tokens/record.ts";
import { issueFor } from "./codes.ts";
import { newUserCode, normalizeUserCode, randomSecret } from "./oauth.ts";
import { admitOpen, releaseOpen } from "./open.ts";

const pollScript = new LuaScript(import.meta.url, "poll");
const decideScript = new LuaScript(import.meta.url, "decide");

export const DEVICE_TTL_MS = 10 * 60_000;
/** RFC 8628 §3.2's default interval, and what each `slow_down` adds (§3.5). */
export const POLL_INTERVAL_MS = 5_000;
const SLOW_DOWN_MS = 5_000;
const GRACE_MS = 60_000;

const member = (id: string) => `device:${id}`;

export type DeviceStart = { device_code: string; user_code: string; expires_in: number; interval: number };

/** A new device authorization; undefined when too many sign-ins are open (open.ts). */
export async function startDevice(ctl: Control, now = Date.now()): Promise<DeviceStart | undefined> {
  const deviceCode = randomSecret();
  const id = hashSecret(deviceCode);
  const expires = now + DEVICE_TTL_MS;
  if (!(await admitOpen(ctl, member(id), expires, now))) return undefined;
  // A user code already in use (1 in 2^34 per open code) is drawn again.
  let userCode = newUserCode();
  while (
    (await ctl.redis.set(
      ctl.keys.userCode(hashSecret(normalizeUserCode(userCode) as string)),
      id,
      "PX",
      DEVICE_TTL_MS,
      "NX",
    )) !== "OK"
  )
    userCode = newUserCode();
  const key = ctl.keys.deviceCode(id);
  await ctl.redis
    .multi()
    .hset(key, {
      status: "pending",
      user_code: hashSecret(normalizeUserCode(userCode) as string),
      expires,
      next_poll: now,
      interval: POLL_INTERVAL_MS,
    })
    .pexpireat(key, expires + GRACE_MS)
    .exec();
  return {
    device_code: deviceCode,
    user_code: userCode,
    expires_in: DEVICE_TTL_MS / 1000,
    interval: POLL_INTERVAL_MS / 1000,
  };
}

/** The pending device authorization a typed user code names: its id (the device code's SHA-256) and the code as shown. */
export async function findDevice(
  ctl: Control,
  typed: string,
  now = Date.now(),
): Promise<{ id: string; userCode: string } | undefined> {
  const code = normalizeUserCode(typed);
  if (!code) return undefined;
  const id = await ctl.redis.get(ctl.keys.userCode(hashSecret(code)));
  if (!id) return undefined;
  const [status, expires] = await ctl.redis.hmget(ctl.keys.deviceCode(id), "status", "expires");
  return status === "pending" && Number(expires) > now
    ? { id, userCode: `${code.slice(0, 4)}-${code.slice(4)}` }
    : undefined;
}

/** Approves (for `subject`) or denies a pending device authorization; false when it is no longer pending. */
export async function decideDevice(
  ctl: Control,
  id: string,
  decision: { subject: TokenSubject } | "denied",
  now = Date.now(),
): Promise<boolean> {
  const key = ctl.keys.deviceCode(id);
  const userCodeHash = (await ctl.redis.hget(key, "user_code")) ?? "";
  const args =
    decision === "denied"
      ? ["denied"]
      : ["approved", "subject_kind", decision.subject.kind, "subject_id", decision.subject.id];
  const decided = (await decideScript.run(ctl.redis, [key, ctl.keys.userCode(userCodeHash)], [now, ...args])) === 1;
  if (decided) await releaseOpen(ctl, member(id));
  return decided;
}

/** What a poll answers (RFC 8628 §3.5): a token, or why not yet or not at all. */
export type DevicePoll =
  | { status: "approved"; grant: TokenGrant & { record: TokenRecord } }
  | { status: "authorization_pending" | "expired_token" | "access_denied" | "unknown" | "subject_gone" }
  | { status: "slow_down"; intervalMs: number };

/** One poll with `deviceCode`: a token once it was approved (handed out once), else where it stands. */
export async function pollDevice(
  ctl: Control,
  deviceCode: string,
  lifetimes: TokenLifetimes,
  now = Date.now(),
): Promise<DevicePoll> {
  const id = hashSecret(deviceCode);
  const [status, a, b] = (await pollScript.run(ctl.redis, [ctl.keys.deviceCode(id)], [now, SLOW_DOWN_MS])) as string[];
  if (status === "slow_down") return { status, intervalMs: Number(a) };
  if (status === "approved") {
    const grant = await issueFor(ctl, { kind: a as TokenSubject["kind"], id: b as string }, lifetimes, now);
    return grant ? { status, grant } : { status: "subject_gone" };
  }
  if (status === "expired_token" || status === "access_denied") await releaseOpen(ctl, member(id));
  return { status: status as "authorization_pending" | "expired_token" | "access_denied" | "unknown" };
}
