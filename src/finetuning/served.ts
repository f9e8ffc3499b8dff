/**
 * The name an adapter a job trained is served under, the job's `fine_tuned_model`:
 * `<endpoint>:<adapter>` (docs/adapters.md), the endpoint being one that serves the base version.
 * Endpoints are named after their model by default, so with none the base's name is the name
 * deploying the base will serve it under.
 */
import { listEndpoints } from "../endpoints/store.ts";
import type { Control } from "../redis/connection.ts";

/**
 * Of the endpoints (A/B variants aside: clients never name them) whose deployed version is `base`,
 * the one named after the model when it is among them, else the first by name; none: the model's name.
 */
export async function servingEndpointName(ctl: Control, base: { name: string; version: string }): Promise<string> {
  const serving = (await listEndpoints(ctl)).filter(
    (e) => !e.variant_of && e.config.model.name === base.name && e.version === base.version,
  );
  return (serving.find((e) => e.name === base.name) ?? serving[0])?.name ?? base.name;
}

export async function fineTunedModelName(
  ctl: Control,
  base: { name: string; version: string },
  adapter: string,
): Promise<string> {
  return `${await servingEndpointName(ctl, base)}:${adapter}`;
}
