/**
 * An endpoint: what is deployed, at which version, with how many replicas wanted, and the update
 * rolling out to it (rollout.ts); and its state as users see it.
 */
import { z } from "zod";
import { DeploymentConfig, Framework, ModelName, ModelVersion } from "../contracts/deployment.ts";
import type { Replica } from "../replicas/record.ts";

/**
 * What an endpoint's replicas load: its deployment (the model, runtime and resources fields count,
 * rollout.ts `revisionId`), the version `latest` resolved to, and the engine.
 */
export const Revision = z.object({ config: DeploymentConfig, version: ModelVersion, framework: Framework });
export type Revision = z.infer<typeof Revision>;

/** Updates in a row may leave this many revisions draining at once; more are refused until some are done. */
export const MAX_DRAINING = 8;

export const Endpoint = z.object({
  name: ModelName,
  /** The deployment as the user wrote it (version may be "latest"). */
  config: DeploymentConfig,
  /** The concrete version `latest` resolved to at deploy time. */
  version: ModelVersion,
  framework: Framework,
  /** Replicas wanted now (the scaler changes this within bounds). */
  desired_replicas: z.number().int().min(0),
  /**
   * Set on the deployment of an extra version for an A/B test (src/abtests/record.ts): the
   * endpoint whose traffic it shares. Such records are not endpoints of their own to clients.
   */
  variant_of: z.string().optional(),
  /** Set on a variant no longer in any split: removed once its queue is empty, so no request is lost. */
  retiring: z.boolean().optional(),
  /**
   * An update that changes what replicas load, while it rolls out: `from` (what served before it)
   * keeps serving until the update's replicas are ready; `failed` says why they cannot start.
   */
  rollout: z.object({ from: Revision, started: z.number().int(), failed: z.string().max(2000).optional() }).optional(),
  /** Earlier revisions whose replicas finish what their queue still holds; each goes once it is empty. */
  draining: z
    .array(Revision.extend({ replicas: z.number().int().min(0), since: z.number().int() }))
    .max(MAX_DRAINING)
    .optional(),
  created: z.number().int(),
  updated: z.number().int(),
});
export type Endpoint = z.infer<typeof Endpoint>;

/**
 * `scaled_to_zero`: no replica wanted right now; a queued request brings one up when autoscaling
 * allows. `updating`: an update rolls out while the previous deployment serves.
 */
export const EndpointState = z.enum(["pending", "available", "degraded", "failed", "scaled_to_zero", "updating"]);
export type EndpointState = z.infer<typeof EndpointState>;

/** `waiting` counts batch records (prioritized) too: they are demand the replicas must serve. */
export type QueueDepth = { waiting: number; active: number };

/** An endpoint as `status` and the dashboard show it (status.ts builds it). */
export type EndpointStatus = {
  endpoint: string;
  state: EndpointState;
  model: string;
  version: string;
  requested_version: string;
  framework: string;
  replicas: { desired: number; ready: number; starting: number; draining: number; failed: number };
  queue: QueueDepth;
  /** Fields of the deployment this engine cannot honour here: stored, reported, not applied. */
  not_applied: string[];
  errors: string[];
  /** What the replicas load when it is not the registered artifact as is (a checkpoint's GGUF conversion, a quantized copy). */
  weights: string[];
  /** LoRA adapters loaded on its replicas now (docs/adapters.md). */
  adapters: string[];
  replica_list: Replica[];
  /** Set on the deployment of an A/B test's extra version: the endpoint it serves. */
  variant_of?: string;
  /**
   * While an update rolls out (rollout.ts): what serves meanwhile, what is starting, and why the
   * update's replicas cannot start when they cannot. `queue` is the serving revision's.
   */
  rollout?: {
    from: { version: string; revision: string; queue: string };
    to: { version: string; revision: string; queue: string };
    started: number;
    ready: number;
    failed?: string;
  };
  /** Earlier revisions whose replicas finish what their queue holds. */
  draining_revisions?: { version: string; revision: string; queue: string; replicas: number }[];
};
