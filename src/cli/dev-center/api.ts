/**
 * The dev center's HTTP API as the CLI sees it (docs/services.md, `/admin/v1/services`): the shapes
 * of its answers, its paths, and the checks made on names before anything is sent, so a typo is a
 * usage error (exit 2) rather than a round trip.
 */
import { ImageTag } from "../../container-images/names.ts";
import type { Release, Rollout, RolloutPhase, ServiceRecord, ServiceReplica } from "../../services/record.ts";
import { ServiceName } from "../../services/names.ts";
import { CliError } from "../common/errors.ts";

/** A variable or secret as the API lists it; a secret never carries `value`. */
export type VarEntry = {
  name: string;
  value?: string;
  version: number;
  /** Epoch ms. */
  updated: number;
  by: { id: string; name: string } | string;
};

/** A replica in `GET .../status` (a narrower view of ServiceReplica). */
export type StatusReplica = Pick<ServiceReplica, "id" | "tag" | "digest" | "state" | "restarts" | "last_exit"> & {
  ready: boolean;
};

export type ServiceStatus = {
  phase: RolloutPhase;
  reason?: string;
  rollout: Rollout;
  current: Release | null;
  replicas: StatusReplica[];
};

/**
 * `GET /admin/v1/services/:name`: the record plus its replicas, recent rollouts, env and secrets
 * and its gateway URL. docs/services.md adds `replicas` to a record that already has `replicas`
 * (the desired count), so either form is accepted: a number (desired) or the replica list, with
 * the desired count then in `desired_replicas` where the API sends it.
 */
export type ServiceView = Omit<ServiceRecord, "replicas"> & {
  replicas: number | StatusReplica[];
  desired_replicas?: number;
  rollouts?: Rollout[];
  env?: VarEntry[];
  secrets?: VarEntry[];
  url?: string;
};

export const SERVICES = "/admin/v1/services";

/** `/admin/v1/services/<name>[/<rest>]`, the name checked first (a usage error naming it). */
export function servicePath(name: string, rest = ""): string {
  return `${SERVICES}/${encodeURIComponent(serviceName(name))}${rest}`;
}

export function serviceName(name: string): string {
  const parsed = ServiceName.safeParse(name);
  if (!parsed.success) throw new CliError(`<name> "${name}": ${parsed.error.issues[0]?.message}`, 2);
  return parsed.data;
}

export function imageTag(tag: string, what = "<tag>"): string {
  const parsed = ImageTag.safeParse(tag);
  if (!parsed.success) throw new CliError(`${what} "${tag}": ${parsed.error.issues[0]?.message}`, 2);
  return parsed.data;
}

/**
 * A non-2xx answer read without the shared client's `finish` (streams are read here): the same
 * one line, the envelope's message and code, as every other command prints an API error.
 */
export async function failure(method: string, path: string, res: Response): Promise<CliError> {
  const text = await res.text().catch(() => "");
  try {
    const err = (JSON.parse(text) as { error?: { message?: string; code?: string } }).error;
    return new CliError(`${err?.message ?? `HTTP ${res.status}`}${err?.code ? ` (${err.code})` : ""}`);
  } catch {
    return new CliError(`${method} ${path}: HTTP ${res.status} with a non-JSON body: ${text.slice(0, 200)}`);
  }
}
