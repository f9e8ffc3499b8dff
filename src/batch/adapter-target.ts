/**
 * A platform batch job naming `model: "<endpoint>:<adapter>"` (docs/adapters.md), as an OpenAI
 * batch's lines do: the version the endpoint serves, every record with the adapter's newest
 * version whose base is that version, sent to the endpoint's queue.
 */
import { PlatformError } from "../contracts/errors.ts";
import { servingQueue } from "../endpoints/rollout.ts";
import { getEndpoint } from "../endpoints/store.ts";
import type { Control } from "../redis/connection.ts";
import { pickAdapterVersion } from "../models/adapter-register.ts";
import type { NameViewer } from "../models/owners.ts";
import { listModelVersions } from "../models/versions.ts";

export type AdapterTarget = { model: string; version: string; adapter: string; queue: string };

/** `model`: `<endpoint>:<adapter>` (CreateBatchRequest checked both names); `version`: the request's; only "latest" (the default) or the endpoint's own version fits an adapter. */
export async function resolveAdapterTarget(
  ctl: Control,
  model: string,
  version: string,
  viewer?: NameViewer,
): Promise<AdapterTarget> {
  const [endpointName, adapterName] = model.split(":") as [string, string];
  const endpoint = await getEndpoint(ctl, endpointName, viewer);
  const base = { name: endpoint.config.model.name, version: endpoint.version };
  if (version !== "latest" && version !== base.version)
    throw new PlatformError(
      400,
      "invalid_request",
      `version: ${model} runs on the version the endpoint ${endpoint.name} serves (${base.name}@${base.version}), not ${version}; leave version out`,
      "version",
    );
  const picked = pickAdapterVersion(
    await listModelVersions(ctl, adapterName, viewer),
    adapterName,
    base,
    endpoint.name,
  );
  return {
    model: base.name,
    version: base.version,
    adapter: `${picked.name}@${picked.version}`,
    queue: servingQueue(endpoint),
  };
}
