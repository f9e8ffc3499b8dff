/**
 * Where services' replicas run (docs/services.md): the reconciler hands each backend every
 * service record; the backend makes its replicas run what the record's rollout asks for and
 * reports back through the ServiceReports (replica records, rollout outcomes, log lines), which the
 * gateway and status read. One interface for the local backend (processes from unpacked images)
 * and Kubernetes (Deployments).
 */
import type { ServiceRecord, ServiceReplica } from "../../../src/services/record.ts";

/** What a backend tells the platform about the services it runs (src/services/reports.ts writes it to Redis). */
export interface ServiceReports {
  /** Writes (or rewrites, as a heartbeat) one replica's record. */
  replica(org: string, name: string, replica: ServiceReplica): Promise<void>;
  /** A replica that no longer exists. */
  replicaGone(org: string, name: string, id: string): Promise<void>;
  /**
   * Ends rollout `rolloutId`: `complete` makes its release the one serving (the old one becomes
   * `previous`), `failed` keeps the old one serving and records `reason`. Ignored when the record
   * has moved on to another rollout meanwhile.
   */
  rolloutFinished(
    org: string,
    name: string,
    rolloutId: number,
    outcome: { phase: "complete" } | { phase: "failed"; reason: string },
  ): Promise<void>;
  /** One line a replica printed (secret values are masked before it is kept). */
  log(org: string, name: string, line: { replica: string; tag: string; text: string; at?: number }): Promise<void>;
  /** The environment a revision runs with: its variables and its secrets, opened (throws until it is written). */
  environment(org: string, name: string, revision: string): Promise<Record<string, string>>;
  /**
   * The same environment kept apart: the Kubernetes backend writes `env` into a ConfigMap and
   * `secrets` into a Secret, so RBAC, `kubectl describe` and audit logs treat each as what it is.
   * Where a name is in both, the secret wins (as it does when `environment` merges them).
   */
  environmentParts(org: string, name: string, revision: string): Promise<EnvironmentParts>;
}

export type EnvironmentParts = { env: Record<string, string>; secrets: Record<string, string> };

export interface ServiceBackend {
  readonly kind: "local" | "kubernetes";
  /** Make the service's replicas run what its record asks for (the rollout's release, else the current one). */
  apply(service: ServiceRecord): Promise<void>;
  /** Stop and delete everything belonging to the service. */
  remove(org: string, name: string): Promise<void>;
  /** The services it runs, as "<org>/<name>", so the reconciler can remove those whose record is gone. */
  services(): string[];
  close(): Promise<void>;
}

export type { ServiceRecord, ServiceReplica };
