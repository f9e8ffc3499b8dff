/**
 * Makes each backend run what the endpoint records ask for. Autoscaling only
 * changes `desired_replicas` on the records; this loop is what acts on them.
 */
import type { RedisClient } from "../src/redis/connection.ts";
import { readEndpoints } from "../src/endpoints/store.ts";
import { type Control, duplicate } from "../src/redis/connection.ts";
import type { ReplicaBackend } from "./backend.ts";
import { coalesced } from "./coalesce.ts";
import { logger } from "../src/telemetry/log.ts";

const log = logger("reconciler");

export type Reconciler = { stop: () => Promise<void>; reconcileNow: () => Promise<void> };

export type ReconcilerOptions = {
  /** Only reconcile while this says so: the scaler that holds the lease is the one that acts. */
  active?: () => boolean;
};

export async function startReconciler(
  ctl: Control,
  backend: ReplicaBackend,
  intervalMs = 1000,
  options: ReconcilerOptions = {},
): Promise<Reconciler> {
  const reconcile = coalesced(async () => {
    if (options.active && !options.active()) return;
    try {
      const { endpoints, invalid } = await readEndpoints(ctl);
      // A record that stopped parsing keeps what it runs until someone fixes or deletes it:
      // only a deleted endpoint loses its replicas. (readEndpoints reports the invalid one.)
      const wanted = new Set([...endpoints.map((e) => e.name), ...invalid.map((r) => r.key)]);
      for (const e of endpoints) {
        // One endpoint the backend cannot scale must not stall the others.
        await backend
          .scale(e, e.desired_replicas)
          .catch((err: Error) => log.error({ endpoint: e.name }, `${e.name}: ${err.message}`));
      }
      for (const name of backend.endpoints()) if (!wanted.has(name)) await backend.remove(name);
    } catch (e) {
      log.error((e as Error).message);
    }
  });
  const subscriber: RedisClient = duplicate(ctl);
  await subscriber.subscribe(ctl.keys.endpointEvents);
  subscriber.on("message", () => void reconcile());
  const timer = setInterval(() => void reconcile(), intervalMs);
  await reconcile();
  return {
    reconcileNow: reconcile,
    stop: async () => {
      clearInterval(timer);
      await subscriber.quit().catch(() => undefined);
      await reconcile.settled();
    },
  };
}
