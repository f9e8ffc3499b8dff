/**
 * The configurations a benchmark compares (`--configs`): the fields a configuration may vary, every
 * combination of the values asked for, and each one's deployment — the measured endpoint itself
 * when it already runs that combination, else a temporary endpoint beside it.
 */
import type { DeploymentConfig } from "../contracts/deployment.ts";
import { PlatformError } from "../contracts/errors.ts";
import { type EndpointInfo, temporaryName } from "../endpoints/temporary.ts";

/** What speculative=on deploys, from `--speculative-model` and `--num-speculative-tokens`. */
export type Speculative = { model?: string; tokens?: number };

/**
 * A field a configuration may vary: its values, and how each changes the measured endpoint's
 * runtime section. Another axis is one more entry here.
 */
export type Axis = {
  values: readonly string[];
  /** The deployment fields it touches, as `status` names them in not_applied. */
  fields: readonly string[];
  apply: (runtime: Record<string, unknown>, value: string, speculative: Speculative) => void;
  /** The endpoint name's part for a value, short: names are at most 63 characters. */
  slug: (value: string) => string;
};

export const AXES: Record<string, Axis> = {
  quantization: {
    values: ["none", "int8", "int4"],
    fields: ["runtime.quantization"],
    apply: (runtime, value) => {
      if (value === "none") delete runtime.quantization;
      else runtime.quantization = value;
    },
    slug: (value) => (value === "none" ? "noquant" : value),
  },
  speculative: {
    values: ["off", "on"],
    fields: ["runtime.speculative_model", "runtime.num_speculative_tokens"],
    apply: (runtime, value, speculative) => {
      if (value === "off") {
        delete runtime.speculative_model;
        delete runtime.num_speculative_tokens;
        return;
      }
      if (speculative.model !== undefined) runtime.speculative_model = speculative.model;
      if (speculative.tokens !== undefined) runtime.num_speculative_tokens = speculative.tokens;
      if (runtime.speculative_model === undefined) {
        throw new PlatformError(
          400,
          "invalid_request",
          "--speculative-model: required with --configs speculative=on (the endpoint has no draft model to speculate with)",
        );
      }
    },
    slug: (value) => `spec-${value}`,
  },
};

/** The varied fields and their values, as `--configs` gave them (checked against AXES). */
export type ConfigAxes = { name: string; values: string[] }[];

/** One configuration to measure: the measured endpoint itself, or a temporary one with `runtime`. */
export type Candidate = {
  name: string;
  fields: Record<string, string>;
  endpoint: string;
  temporary: boolean;
  runtime: Record<string, unknown>;
  varied: string[];
};

/** Every combination of the --configs values; a combination the endpoint already runs is measured on it. */
export function candidates(
  model: string,
  base: EndpointInfo | undefined,
  axes: ConfigAxes,
  speculative: Speculative,
): Candidate[] {
  if (axes.length === 0)
    return [{ name: "as deployed", fields: {}, endpoint: model, temporary: false, runtime: {}, varied: [] }];
  if (!base) throw new Error("--configs deploys temporary endpoints, which takes an admin key");
  let combos: Record<string, string>[] = [{}];
  for (const { name, values } of axes) combos = combos.flatMap((c) => values.map((v) => ({ ...c, [name]: v })));
  return combos.map((fields) => {
    const runtime: Record<string, unknown> = structuredClone(base.config.runtime ?? {});
    for (const [name, value] of Object.entries(fields)) (AXES[name] as Axis).apply(runtime, value, speculative);
    const same = JSON.stringify(sortKeys(runtime)) === JSON.stringify(sortKeys(base.config.runtime ?? {}));
    const slug = Object.entries(fields)
      .map(([name, value]) => (AXES[name] as Axis).slug(value))
      .join("-");
    return {
      name: Object.entries(fields)
        .map(([k, v]) => `${k}=${v}`)
        .join(", "),
      fields,
      endpoint: same ? model : temporaryName(model, "bench", slug),
      temporary: !same,
      runtime,
      varied: axes.flatMap((a) => (AXES[a.name] as Axis).fields),
    };
  });
}

const sortKeys = (o: Record<string, unknown>) =>
  Object.fromEntries(Object.entries(o).sort(([a], [b]) => a.localeCompare(b)));

/** The candidate's deployment: the measured endpoint's, with the candidate's runtime, beside it. */
export function temporaryConfig(base: EndpointInfo, candidate: Candidate): DeploymentConfig & { endpoint: string } {
  const { autoscaling: _autoscaling, ...config } = base.config;
  return {
    ...config,
    endpoint: candidate.endpoint,
    // The version the measured endpoint runs, not whatever "latest" means now.
    model: { ...config.model, version: base.version },
    runtime: candidate.runtime as DeploymentConfig["runtime"],
    // As many replicas as the measured endpoint wants now (autoscaling may have moved it), and no autoscaling: a fixed size compares.
    resources: { ...config.resources, replicas: Math.max(1, base.replicas.desired) },
  };
}
