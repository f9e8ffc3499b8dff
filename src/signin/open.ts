/**
 * How many sign-ins may be open at once, install-wide: every browser flow and device code counts
 * until it ends or expires. They are made by requests without credentials, so without a cap a
 * script could fill Redis with them; past it new ones are refused until some end.
 */
import type { Control } from "../redis/connection.ts";

export const MAX_OPEN = 10_000;
/** Longer than any member lives (a device code: 10 min + 1), so the index never outlives its use by much. */
const INDEX_TTL_MS = 15 * 60_000;

/** Counts `member` (`<kind>:<sha256>`) as open until `expires` (epoch ms); false when the cap is reached. */
export async function admitOpen(ctl: Control, member: string, expires: number, now = Date.now()): Promise<boolean> {
  const key = ctl.keys.signinOpen;
  const replies = await ctl.redis
    .multi()
    .zremrangebyscore(key, "-inf", now)
    .zadd(key, expires, member)
    .zcard(key)
    .pexpire(key, INDEX_TTL_MS)
    .exec();
  const open = Number(replies?.[2]?.[1] ?? 0);
  if (open <= MAX_OPEN) return true;
  await ctl.redis.zrem(key, member);
  return false;
}

/** `member` ended (signed in, denied, given up): it no longer counts. */
export async function releaseOpen(ctl: Control, member: string): Promise<void> {
  await ctl.redis.zrem(ctl.keys.signinOpen, member);
}
