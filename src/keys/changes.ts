/**
 * Announcements that a caller changed: an API key revoked or its limits changed, a CLI token ended, a
 * user's organization or role changed. Every gateway subscribes (src/gateway/callers.ts) and drops the
 * caller from its cache at once, so a revocation holds on every gateway without waiting out the cache.
 * Only ids go on the channel, never a secret or its hash.
 */
import type { Control } from "../redis/connection.ts";
import { logger } from "../telemetry/log.ts";

const log = logger("keys");

/** Whose credentials changed: a key (and the tokens acting as it), one token, or a user (and its tokens). */
export type CallerChange = { kind: "key" | "token" | "user"; id: string };

/** What a message may be: the kind and an id of ours (key_…, tok_…, usr_…), so a message stays small. */
const MESSAGE = /^(key|token|user):([A-Za-z0-9_-]{1,64})$/;

export function encodeCallerChange(change: CallerChange): string {
  return `${change.kind}:${change.id}`;
}

/** The change a message announces, or undefined for anything else on the channel. */
export function decodeCallerChange(message: string): CallerChange | undefined {
  const m = MESSAGE.exec(message);
  return m ? { kind: m[1] as CallerChange["kind"], id: m[2] as string } : undefined;
}

/**
 * Publishes the change, after it is stored (a gateway that drops the caller then reads the new state).
 * Never rejects: the change itself stands, and gateways that miss the message see it within their
 * cache's lifetime.
 */
export async function announceCallerChange(ctl: Control, change: CallerChange): Promise<void> {
  if (!MESSAGE.test(encodeCallerChange(change))) return;
  try {
    await ctl.redis.publish(ctl.keys.callerEvents, encodeCallerChange(change));
  } catch (e) {
    log.warn(
      { [`${change.kind}_id`]: change.id },
      `could not announce the change of ${change.kind} ${change.id}: ${String(e)}; gateways see it within 5 s`,
    );
  }
}
