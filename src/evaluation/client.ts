/**
 * Evaluations run through the HTTP API, as `platform training evaluate` runs them: each target is
 * created; a version no endpoint serves (the 409) is evaluated on a temporary endpoint
 * `<model>--eval-<version>` (endpoints/temporary.ts), deployed like the model's other endpoint;
 * then all are followed until they end.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { isApiError, type PlatformApi, type Reporter } from "../contracts/client.ts";
import type { DeploymentConfig } from "../contracts/deployment.ts";
import { type EndpointInfo, TemporaryEndpoints, temporaryName } from "../endpoints/temporary.ts";
import type { PublicEvaluation } from "./jobs.ts";

export type RemoteEvaluationOptions = {
  /** false: refuse a version no endpoint serves (the 409) rather than deploy a temporary endpoint for it. */
  deploy: boolean;
  progress: Reporter;
  /** What the run rejects with on Ctrl-C / SIGTERM while a temporary endpoint is up. */
  interruption: Error;
  /** Every poll's answer, for the caller to show. */
  onUpdate: (current: PublicEvaluation[], final: boolean) => void;
};

const FINAL = ["succeeded", "failed", "cancelled"];

/**
 * Creates an evaluation of each request and waits for them all. The evaluations on a temporary
 * endpoint are cancelled when the run fails or is interrupted, as their endpoint goes with it.
 */
export async function evaluateAll(
  api: PlatformApi,
  model: string,
  requests: { model: string }[],
  options: RemoteEvaluationOptions,
): Promise<PublicEvaluation[]> {
  const { progress } = options;
  let temporary: TemporaryEndpoints | undefined;
  /** `<model>@<version>` of each version served by a temporary endpoint of this run. */
  const onTemporary = new Set<string>();
  const created: PublicEvaluation[] = [];
  const create = (request: { model: string }) =>
    api.request<PublicEvaluation>("POST", "/admin/v1/evaluations", request);
  try {
    for (const request of requests) {
      const evaluation = await create(request).catch(async (e) => {
        if (!options.deploy || !isApiError(e, "model_not_deployed")) throw e;
        temporary ??= new TemporaryEndpoints(api, progress, {
          purpose: "evaluation",
          interruption: options.interruption,
        });
        // `<model>@<version>[:<adapter>]`: an adapter is served by its base's endpoint.
        const version = (request.model.split(":")[0] as string).split("@")[1] as string;
        onTemporary.add(`${model}@${await deployFor(api, temporary, model, version, e, progress)}`);
        return create(request);
      });
      created.push(evaluation);
    }
    return await waitFor(api, created, options.onUpdate, temporary?.signal);
  } catch (e) {
    for (const c of created)
      if (onTemporary.has(`${c.base.name}@${c.base.version}`))
        await api.request("POST", `/admin/v1/evaluations/${encodeURIComponent(c.id)}/cancel`).catch(() => undefined);
    throw temporary?.signal.aborted ? temporary.signal.reason : e;
  } finally {
    await temporary?.close();
  }
}

/**
 * Which endpoint's settings evaluate a version no endpoint serves: the one named after the model,
 * else one of its own (not an A/B variant, not another run's temporary one), else any serving the
 * model. The same engine settings (e.g. dtype) give numbers comparable with what it serves.
 */
export function evaluationDeployment(
  endpoints: EndpointInfo[],
  model: string,
  version: string,
): { config: DeploymentConfig & { endpoint: string }; like: string | undefined } {
  const ofModel = endpoints.filter((e) => e.config.model.name === model);
  const like =
    ofModel.find((e) => e.endpoint === model) ??
    ofModel.find((e) => e.variant_of === undefined && !/--(bench|eval)-/.test(e.endpoint)) ??
    ofModel[0];
  const settings = like ? (({ autoscaling: _autoscaling, ...config }) => config)(like.config) : undefined;
  return {
    like: like?.endpoint,
    config: {
      endpoint: temporaryName(model, "eval", version),
      model: { ...settings?.model, name: model, version },
      runtime: settings?.runtime ?? {},
      resources: { ...(settings?.resources ?? { parallel: 4 }), replicas: 1 },
    },
  };
}

/** Deploys the temporary endpoint for a version no endpoint serves (`refusal`, the 409); one replica. Its version, resolved. */
async function deployFor(
  api: PlatformApi,
  temporary: TemporaryEndpoints,
  model: string,
  version: string,
  refusal: Error,
  progress: Reporter,
): Promise<string> {
  let endpoints: EndpointInfo[];
  try {
    endpoints = (await api.request<{ data: EndpointInfo[] }>("GET", "/admin/v1/endpoints")).data;
  } catch (e) {
    if (isApiError(e, "permission_denied"))
      throw new Error(`${refusal.message}; deploying a temporary endpoint for it takes an admin key: ${e.message}`);
    throw e;
  }
  const { config, like } = evaluationDeployment(endpoints, model, version);
  progress.line(
    `no endpoint serves ${model}@${version}: deploying the temporary endpoint ${config.endpoint}; it is removed at the end (${like ? `${like}'s settings` : "default settings"}, 1 replica)`,
  );
  return (await temporary.deploy(config, "")).version;
}

async function waitFor(
  api: PlatformApi,
  jobs: PublicEvaluation[],
  onUpdate: RemoteEvaluationOptions["onUpdate"],
  signal?: AbortSignal,
): Promise<PublicEvaluation[]> {
  let current = jobs;
  for (;;) {
    current = await Promise.all(
      current.map((e) => api.request<PublicEvaluation>("GET", `/admin/v1/evaluations/${encodeURIComponent(e.id)}`)),
    );
    const final = current.every((e) => FINAL.includes(e.state));
    onUpdate(current, final);
    if (final) return current;
    await sleep(500, undefined, signal ? { signal } : undefined);
  }
}
