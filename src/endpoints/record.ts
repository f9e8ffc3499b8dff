/**
 * An endpoint: what is deployed, at which version, with how many replicas wanted, and the update
 * rolling out to it (rollout.ts); and its state as users see it.
 */
import { z } from "zod";
import { DeploymentConfig, Framework, ModelName, ModelVersion } from "../contracts/deployment.ts";

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
