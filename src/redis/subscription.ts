/**
 * A subscription to control-plane channels that outlives reconnects. ioredis would subscribe again by
 * itself after a reconnect, but that call has no handler: a connection closed meanwhile (a gateway
 * stopping just after Redis dropped its subscribers) rejects it as an unhandled rejection. Here the
 * client's own resubscription is off and each "ready" subscribes again, handling its failure (the
 * next "ready" tries again).
 */
import { type Control, duplicateWith } from "./connection.ts";

export type SubscriptionHooks = {
  /** The connection dropped: messages may be missed until `onListening` is called again. */
  onLost?: () => void;
  /** Redis answered a (re)subscribe: from now on every message is heard. */
  onListening?: () => void;
};

export type Subscription = { close(): Promise<void> };

/** Calls `onMessage` with every message on `channels` until closed; resolves once the first subscribe is answered. */
export async function subscribe(
  ctl: Control,
  channels: readonly string[],
  onMessage: (channel: string, message: string) => void,
  hooks: SubscriptionHooks = {},
): Promise<Subscription> {
  const redis = duplicateWith(ctl, { autoResubscribe: false });
  let closed = false;
  let connected = false;
  const listen = async () => {
    await redis.subscribe(...channels);
    if (!closed) hooks.onListening?.();
  };
  redis.on("message", onMessage);
  for (const event of ["close", "end", "error"]) redis.on(event, () => hooks.onLost?.());
  redis.on("ready", () => {
    // On the first "ready" the subscribe below, queued while connecting, goes out by itself.
    if (connected && !closed) listen().catch(() => undefined);
    connected = true;
  });
  try {
    await listen();
  } catch (e) {
    redis.disconnect();
    throw e;
  }
  return {
    close: async () => {
      closed = true;
      await redis.quit().catch(() => undefined);
    },
  };
}
