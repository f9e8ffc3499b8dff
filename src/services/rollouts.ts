/**
 * Starting rollouts (docs/services.md, "Rollouts"): the first deployment, a new tag, a restart of
 * the serving tag with the environment as it is now, and undo (back to the previous tag). Each
 * makes a release (an image the organization published, src/container-images/, and a snapshot of the
 * variables and sealed secrets) and marks the record's rollout `progressing`; the scaler's backend
 * carries it out and ends it (reports.ts). A tag never published is refused before anything starts.
 */
import { PlatformError } from "../contracts/errors.ts";
import { getImage } from "../container-images/store.ts";
import { getVersion, type ProtoCatalog } from "../protos/store.ts";
import type { Control } from "../redis/connection.ts";
import type { RepoType } from "./names.ts";
import type { Release, Rollout, ServiceRecord } from "./record.ts";
import type { SecretBox } from "./secrets.ts";
import {
  createService,
  getService,
  listServices,
  pruneReleases,
  releaseOf,
  saveRelease,
  saveRollout,
  updateService,
} from "./store.ts";
import { setVariables, snapshotVariables } from "./variables.ts";

type Who = { id: string; name: string };

export type DeployInput = {
  name: string;
  tag: string;
  repo_type: RepoType;
  image_repository: string;
  replicas: number;
  port: number;
  env: Record<string, string>;
};

export type RolloutRequest = { tag: string } | { restart: true } | { undo: true };

export type RolloutContext = { ctl: Control; protos: ProtoCatalog; box: SecretBox; deadlineMs: number };

/** The published image a release runs: 404 naming how to publish when the tag was never recorded. */
async function publishedImage(ctl: Control, org: string, repository: string, tag: string) {
  const image = await getImage(ctl, org, repository.split("/").at(-1) ?? "", tag);
  if (image.repository !== repository)
    throw new PlatformError(
      404,
      "image_not_found",
      `${tag} was published to ${image.repository}, not ${repository}; deploy from the repository it was pushed to`,
      "tag",
    );
  return image;
}

/** The RPC services (`<package>.<Service>`) the image's proto packages declare. */
async function rpcServicesOf(reg: ProtoCatalog, org: string, protos: Release["protos"]): Promise<string[]> {
  const names = new Set<string>();
  for (const p of protos) {
    const record = await getVersion(reg, org, p.package, p.version).catch(() => undefined);
    for (const s of record?.service_names ?? []) names.add(s);
  }
  return [...names].sort();
}

/** One service per RPC service in an organization: the gateway must know where a call goes. */
async function refuseTakenRpcServices(ctl: Control, org: string, name: string, rpcServices: string[]): Promise<void> {
  for (const other of await listServices(ctl, org)) {
    if (other.name === name) continue;
    const taken = other.rpc_services.find((s) => rpcServices.includes(s));
    if (taken)
      throw new PlatformError(
        409,
        "rpc_service_taken",
        `${taken} is served by service "${other.name}" in your organization; roll that one out instead, or delete it first`,
        "tag",
      );
  }
}

function newRollout(
  id: number,
  release: Release,
  fromTag: string | null,
  cause: Rollout["cause"],
  by: Who,
  deadlineMs: number,
): Rollout {
  return {
    id,
    release,
    from_tag: fromTag,
    cause,
    phase: "progressing",
    started: Date.now(),
    deadline_ms: deadlineMs,
    by,
  };
}

export async function deployService(
  rc: RolloutContext,
  org: string,
  by: Who,
  input: DeployInput,
): Promise<ServiceRecord> {
  const { ctl } = rc;
  const existing = await getService(ctl, org, input.name).catch(() => undefined);
  if (existing)
    throw new PlatformError(
      409,
      "service_exists",
      `service "${input.name}" is already deployed; roll out a new tag with \`platform dev-center rollout start ${input.name} <tag>\``,
      "name",
    );
  const image = await publishedImage(ctl, org, input.image_repository, input.tag);
  const release = releaseOf(image, 1);
  const rpcServices = await rpcServicesOf(rc.protos, org, image.protos);
  await refuseTakenRpcServices(ctl, org, input.name, rpcServices);
  if (Object.keys(input.env).length > 0) await setVariables(ctl, rc.box, "env", org, input.name, input.env, by);
  await saveRelease(ctl, org, input.name, release.revision, await snapshotVariables(ctl, org, input.name));
  const now = Date.now();
  const record: ServiceRecord = {
    org,
    name: input.name,
    repo_type: input.repo_type,
    image_repository: input.image_repository,
    port: input.port,
    replicas: input.replicas,
    rpc_services: rpcServices,
    owner: by,
    created: now,
    updated: now,
    overview: "",
    current: null,
    previous: null,
    rollout: newRollout(1, release, null, "deploy", by, rc.deadlineMs),
  };
  await createService(ctl, record);
  return record;
}

export async function startRollout(
  rc: RolloutContext,
  org: string,
  name: string,
  by: Who,
  request: RolloutRequest,
): Promise<ServiceRecord> {
  const { ctl } = rc;
  const before = await getService(ctl, org, name);
  const serving = before.current ?? before.rollout.release;
  let tag: string;
  let cause: Rollout["cause"];
  if ("tag" in request) {
    tag = request.tag;
    cause = "start";
  } else if ("restart" in request) {
    tag = serving.tag;
    cause = "restart";
  } else {
    if (!before.previous)
      throw new PlatformError(
        409,
        "no_previous_release",
        `${name} has no previous release to go back to: only ${serving.tag} has served`,
      );
    tag = before.previous.tag;
    cause = "undo";
  }
  const image = await publishedImage(ctl, org, before.image_repository, tag);
  const snapshot = await snapshotVariables(ctl, org, name);
  const rpcServices = await rpcServicesOf(rc.protos, org, image.protos);
  await refuseTakenRpcServices(ctl, org, name, rpcServices);
  // The snapshot is written before the record names its revision, so the backend never starts a
  // replica without its environment; a concurrent rollout taking that id gets it written again.
  const predicted = `r${before.rollout.id + 1}`;
  await saveRelease(ctl, org, name, predicted, snapshot);
  let saved: string | undefined;
  let superseded: Rollout | undefined;
  const updated = await updateService(ctl, org, name, (record) => {
    const id = record.rollout.id + 1;
    superseded = record.rollout.phase === "progressing" ? record.rollout : undefined;
    const release = releaseOf(image, id);
    saved = release.revision;
    return {
      ...record,
      rpc_services: rpcServices,
      rollout: newRollout(id, release, record.current?.tag ?? null, cause, by, rc.deadlineMs),
    };
  });
  if (saved && saved !== predicted) await saveRelease(ctl, org, name, saved, snapshot);
  // The history says what became of a rollout this one took over from.
  if (superseded)
    await saveRollout(ctl, org, name, {
      ...superseded,
      phase: "failed",
      reason: `superseded by rollout ${updated.rollout.id} (${updated.rollout.release.tag}) before it completed`,
      finished: Date.now(),
    });
  await pruneReleases(ctl, updated);
  return updated;
}
