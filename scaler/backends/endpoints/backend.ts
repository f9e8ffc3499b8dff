/**
 * Where replicas run. The reconciler and the autoscaler decide how many
 * replicas an endpoint should have; a backend makes that true.
 *
 * Readiness is not the backend's business: every worker heartbeats into Redis
 * (see src/replicas/heartbeats.ts), whatever runs it.
 */
import type { Endpoint } from "../../../src/endpoints/record.ts";

export interface BackendReplicas {
  /** Replicas the backend has asked for (running or starting). */
  requested: number;
  /** Replicas the backend itself sees as ready, when it can tell (Kubernetes can). */
  ready?: number;
}

export interface ReplicaBackend {
  readonly kind: "local" | "kubernetes";
  /** Make `replicas` replicas of the endpoint exist, creating or updating what is needed. */
  scale(endpoint: Endpoint, replicas: number): Promise<void>;
  /** What the backend runs for an endpoint now. */
  observe(endpointName: string): Promise<BackendReplicas>;
  /** Stop and delete everything belonging to the endpoint. */
  remove(endpointName: string): Promise<void>;
  /** Endpoints the backend runs replicas for, so the reconciler can remove those whose record is gone. */
  endpoints(): string[];
  /** Stop managing; the local backend stops its children, Kubernetes leaves the cluster as is. */
  close(): Promise<void>;
}
