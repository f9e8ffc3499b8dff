/** Control-plane records kept in Redis (registry, endpoints, replicas, API keys). */
import { z } from "zod";
import { DeploymentConfig, Framework, ModelName, ModelVersion } from "./deployment.ts";
import { KeyLimits } from "./limits.ts";

export const GgufSummary = z.object({
  architecture: z.string().nullable(),
  parameters: z.number().int().nullable(),
  context_length: z.number().int().nullable(),
  quantization: z.string().nullable(),
  chat_template: z.boolean(),
  /**
   * UTF-8 bytes of the vocabulary's longest token: the gateway's cheap bound on a prompt's
   * token count (src/gateway/limits.ts). Absent on versions registered before it was recorded.
   */
  max_token_bytes: z.number().int().positive().nullable().optional(),
});
export type GgufSummary = z.infer<typeof GgufSummary>;

// Names are checked on the way out of Redis too: a record written by hand or by an older
// version must not smuggle a name into queue names and keys.
export const ModelVersionRecord = z.object({
  name: ModelName,
  version: ModelVersion,
  framework: Framework,
  /** Where the user said it came from (path, file://, https://, hf://, s3://). */
  source: z.string(),
  /** Where the platform keeps its copy, relative to the artifact store root. */
  artifact: z.string(),
  sha256: z.string(),
  size_bytes: z.number().int(),
  gguf: GgufSummary.nullable(),
  created: z.number().int(),
});
export type ModelVersionRecord = z.infer<typeof ModelVersionRecord>;

export const EndpointRecord = z.object({
  name: ModelName,
  /** The deployment as the user wrote it (version may be "latest"). */
  config: DeploymentConfig,
  /** The concrete version `latest` resolved to at deploy time. */
  version: ModelVersion,
  framework: Framework,
  /** Replicas wanted now (the scaler changes this within bounds). */
  desired_replicas: z.number().int().min(0),
  /**
   * Set on the deployment of an extra version for an A/B test (src/contracts/abtest.ts): the
   * endpoint whose traffic it shares. Such records are not endpoints of their own to clients.
   */
  variant_of: z.string().optional(),
  /** Set on a variant no longer in any split: removed once its queue is empty, so no request is lost. */
  retiring: z.boolean().optional(),
  created: z.number().int(),
  updated: z.number().int(),
});
export type EndpointRecord = z.infer<typeof EndpointRecord>;

export const ReplicaState = z.enum(["starting", "ready", "draining", "failed"]);
export type ReplicaState = z.infer<typeof ReplicaState>;

/** Written by each worker as its heartbeat; expires when the worker stops beating. */
export const ReplicaRecord = z.object({
  id: z.string(),
  endpoint: z.string(),
  model: z.string(),
  version: z.string(),
  state: ReplicaState,
  pid: z.number().int(),
  host: z.string(),
  started: z.number().int(),
  heartbeat: z.number().int(),
  in_flight: z.number().int(),
  parallel: z.number().int(),
  error: z.string().optional(),
  /** The replica's BullMQ worker id: its jobs' locks start with it (src/queue/reclaim.ts). */
  queue_worker: z.string().optional(),
  /** The queue it serves (its endpoint's, engines.ts `endpointQueueName`); absent from older releases: the version's default. */
  queue: z.string().optional(),
  /** How often this replica beats: a record older than a few beats is a replica gone silent. */
  heartbeat_ms: z.number().int().positive().optional(),
  /** Where it serves /livez, /readyz and /metrics on `host`, when it does (`--health-port`). */
  health_port: z.number().int().min(1).max(65535).optional(),
});
export type ReplicaRecord = z.infer<typeof ReplicaRecord>;

export const ApiKeyRole = z.enum(["admin", "user"]);
export type ApiKeyRole = z.infer<typeof ApiKeyRole>;

export const ApiKeyRecord = z.object({
  id: z.string(),
  name: z.string(),
  role: ApiKeyRole,
  /** First characters of the key, so a user can tell keys apart in listings. */
  prefix: z.string(),
  hash: z.string(),
  created: z.number().int(),
  /** Rate limits (src/contracts/limits.ts); absent: none. */
  limits: KeyLimits.optional(),
});
export type ApiKeyRecord = z.infer<typeof ApiKeyRecord>;

/** `scaled_to_zero`: no replica wanted right now; a queued request brings one up when autoscaling allows. */
export const EndpointState = z.enum(["pending", "available", "degraded", "failed", "scaled_to_zero"]);
export type EndpointState = z.infer<typeof EndpointState>;
