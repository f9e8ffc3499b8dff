/**
 * Makes each backend run what the endpoint records ask for. Autoscaling only
 * changes `desired_replicas` on the records; this loop is what acts on them.
 */
import { readEndpoints } from "../src/endpoints/store.ts";
import type { Control } from "../src/redis/connection.ts";
import { subscribe } from "../src/redis/subscription.ts";
import type { ReplicaBackend } from "./backends/endpoints/backend.ts";
import type { ServiceBackend } from "./backends/services/backend.ts";
import { readAllServices, serviceKey } from "../src/services/store.ts";
import { coalesced } from "./coalesce.ts";
import { logger } from "../src/telemetry/log.ts";

const log = logger("reconciler");

export type Reconciler = { stop: () => Promise<void>; reconcileNow: () => Promise<void> };

export type ReconcilerOptions = {
  /** Only reconcile while this says so: the scaler that holds the lease is the one that acts. */
  active?: () => boolean;
  /** Where services run (docs/services.md); none: services are not this scaler's business. */
  services?: ServiceBackend;
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
    if (options.services) await reconcileServices(ctl, options.services);
  });
  const channels = options.services ? [ctl.keys.endpointEvents, ctl.keys.serviceEvents] : [ctl.keys.endpointEvents];
  // Back after an outage, a change may have been missed: reconcile then too.
  const subscription = await subscribe(ctl, channels, () => void reconcile(), { onListening: () => void reconcile() });
  const timer = setInterval(() => void reconcile(), intervalMs);
  await reconcile();
  return {
    reconcileNow: reconcile,
    stop: async () => {
      clearInterval(timer);
      await subscription.close();
      await reconcile.settled();
    },
  };
}

/** Services the same way: every record applied, the replicas of deleted ones removed. */
async function reconcileServices(ctl: Control, backend: ServiceBackend): Promise<void> {
  try {
    const { services, invalid } = await readAllServices(ctl);
    const wanted = new Set([...services.map((s) => serviceKey(s.org, s.name)), ...invalid.map((r) => r.key)]);
    await Promise.all(
      services.map((s) =>
        backend.apply(s).catch((err: Error) => log.error({ service: s.name, org: s.org }, `${s.name}: ${err.message}`)),
      ),
    );
    for (const key of backend.services()) {
      if (wanted.has(key)) continue;
      const [org, name] = key.split("/") as [string, string];
      await backend.remove(org, name);
      await ctl.redis.del(ctl.keys.serviceReplicas(key));
    }
  } catch (e) {
    log.error((e as Error).message);
  }
}
