/**
 * The scaler as `platform scaler` and `platform up` run it: the autoscaler
 * (which holds the lease) and the reconciler (which acts through a backend
 * only while this scaler holds the lease).
 */
import type { Control } from "../src/redis/connection.ts";
import { type Autoscaler, type AutoscalerOptions, startAutoscaler } from "./autoscaler.ts";
import type { ReplicaBackend } from "./backends/endpoints/backend.ts";
import type { ServiceBackend } from "./backends/services/backend.ts";
import { type Reconciler, startReconciler } from "./reconciler.ts";

export type RunningScaler = { autoscaler: Autoscaler; reconciler: Reconciler; stop: () => Promise<void> };

export async function startScaler(
  ctl: Control,
  backend: ReplicaBackend,
  options: AutoscalerOptions & { reconcileIntervalMs?: number; services?: ServiceBackend } = {},
): Promise<RunningScaler> {
  let reconciler: Reconciler | undefined;
  const autoscaler = await startAutoscaler(ctl, {
    ...options,
    onLeadership: (leader) => {
      options.onLeadership?.(leader);
      if (leader) {
        void reconciler?.reconcileNow();
      } else if (backend.kind === "local") {
        // Local replicas are this process's children; the new leader starts its own.
        void Promise.all(backend.endpoints().map((name) => backend.remove(name))).catch(() => undefined);
        const services = options.services;
        if (services?.kind === "local")
          void Promise.all(
            services.services().map((key) => services.remove(...(key.split("/") as [string, string]))),
          ).catch(() => undefined);
      }
    },
  });
  reconciler = await startReconciler(ctl, backend, options.reconcileIntervalMs, {
    active: () => autoscaler.isLeader(),
    services: options.services,
  });
  const started = reconciler;
  return {
    autoscaler,
    reconciler: started,
    stop: async () => {
      await started.stop();
      await autoscaler.stop();
    },
  };
}
