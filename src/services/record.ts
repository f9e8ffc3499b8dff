/**
 * A deployed service's record (docs/services.md): what the dev center deploys (an image the
 * organization published, src/container-images/), how many replicas, and its rollouts. One record per
 * organization and name; the scaler makes its backend run what the record says, the gateway
 * routes `/rpc/<package>.<Service>/<Method>` to its ready replicas.
 *
 * A release is what one rollout runs: a tag and digest, and the environment and secrets as they
 * were when it started (a snapshot under its revision, src/services/store.ts), so a replica that
 * restarts later runs what its rollout started with.
 */
import { z } from "zod";
import { OrgId } from "../contracts/orgs.ts";
import { ImageDigest, ImageRepository, ImageTag } from "../container-images/names.ts";
import { ProtoPackageName, ProtoVersionName } from "../protos/names.ts";
import { RepoType, RpcServiceName, ServiceName } from "./names.ts";

const Who = z.object({ id: z.string(), name: z.string() });

export const Release = z.object({
  tag: ImageTag,
  digest: ImageDigest,
  /** `r<rollout id>`: names the replicas and the environment snapshot of the rollout that made it. */
  revision: z.string().regex(/^r[0-9]+$/),
  /** The proto package versions the image implements (from its image record). */
  protos: z.array(z.object({ package: ProtoPackageName, version: ProtoVersionName })).max(100),
});
export type Release = z.infer<typeof Release>;

export const RolloutPhase = z.enum(["progressing", "complete", "failed"]);
export type RolloutPhase = z.infer<typeof RolloutPhase>;

export const Rollout = z.object({
  /** 1, 2, ... per service. */
  id: z.number().int().positive(),
  release: Release,
  /** The tag that served when it started (none for the first deployment). */
  from_tag: ImageTag.nullable(),
  /** `deploy`, `start` (a new tag), `restart` (the same tag, new environment), `undo`. */
  cause: z.enum(["deploy", "start", "restart", "undo"]),
  phase: RolloutPhase,
  /** Why it failed: the exit code, the failing probe, the last log lines (never a secret's value). */
  reason: z.string().max(8192).optional(),
  /** Epoch ms. */
  started: z.number().int(),
  finished: z.number().int().optional(),
  /** How long new replicas may take to become ready before the rollout fails. */
  deadline_ms: z.number().int().positive(),
  by: Who,
});
export type Rollout = z.infer<typeof Rollout>;

export const ServiceRecord = z.object({
  org: OrgId,
  name: ServiceName,
  repo_type: RepoType,
  image_repository: ImageRepository,
  /** The port the image's process listens on in a container (PORT); the local backend picks free ones. */
  port: z.number().int().min(1).max(65535),
  replicas: z.number().int().min(1).max(20),
  /** The RPC services it implements (`<package>.<Service>`), routed under /rpc/ (from its protos). */
  rpc_services: z.array(RpcServiceName).max(50),
  owner: Who,
  /** Epoch ms. */
  created: z.number().int(),
  updated: z.number().int(),
  overview: z.string().default(""),
  /** What serves now (null until a first rollout completes). */
  current: Release.nullable(),
  /** What served before `current`: `rollout undo` goes back to it. */
  previous: Release.nullable(),
  /** The latest rollout (history under its own key). */
  rollout: Rollout,
});
export type ServiceRecord = z.infer<typeof ServiceRecord>;

/**
 * A replica as its backend reports it (`cp:service-replicas:<org>/<name>`, one field per replica),
 * read by the gateway (ready ones are routed to), status and the dashboard.
 */
export const ServiceReplica = z.object({
  id: z.string().max(128),
  revision: z.string(),
  tag: ImageTag,
  digest: ImageDigest,
  /** `starting`: not ready yet; `ready`: takes calls; `draining`: finishing, takes none; `crashed`: waiting to restart. */
  state: z.enum(["starting", "ready", "draining", "crashed"]),
  /** Where the gateway reaches it (http://host:port; h2c for gRPC). */
  url: z.string().max(2048),
  /** Its own Prometheus endpoint, when it has one. */
  metrics_url: z.string().max(2048).optional(),
  started: z.number().int(),
  ready_at: z.number().int().optional(),
  restarts: z.number().int().min(0),
  last_exit: z
    .object({ code: z.number().int().nullable(), signal: z.string().nullable(), at: z.number().int() })
    .optional(),
  /** Epoch ms the backend last wrote it: the gateway ignores one silent for REPLICA_STALE_MS. */
  heartbeat: z.number().int(),
});
export type ServiceReplica = z.infer<typeof ServiceReplica>;

/** A replica record not rewritten for this long is taken for gone (its scaler died with it). */
export const REPLICA_STALE_MS = 10_000;
