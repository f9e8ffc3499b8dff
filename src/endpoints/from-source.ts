/**
 * A model source deployed as an endpoint in one step, as `platform up --model` does: registered
 * for llama.cpp unless the same artifact was registered before (the file's digest, or the source
 * of a remote one or a checkpoint directory), then deployed, then its state told as it changes.
 */
import { createHash } from "node:crypto";
import { createReadStream, statSync } from "node:fs";
import { basename, join } from "node:path";
import { pipeline } from "node:stream/promises";
import { DeploymentConfig } from "../contracts/deployment.ts";
import type { Control } from "../redis/connection.ts";
import { importModel } from "../models/import.ts";
import type { SourceProgress } from "../models/sources.ts";
import { type ModelTask, type RegisteredVersion, taskOf } from "../models/record.ts";
import { listModelVersions } from "../models/versions.ts";
import type { Settings } from "../settings/index.ts";
import { openStore } from "../storage/index.ts";
import { endpointStatus } from "./status.ts";
import { deployEndpoint, findEndpoint, getEndpoint } from "./store.ts";

export type SourceDeployment = {
  /** A local path (absolute) or a remote source (https://, hf://, s3://). */
  source: string;
  remote: boolean;
  name: string;
  task: ModelTask | undefined;
  replicas: number;
  parallel?: number;
  onProgress?: (p: SourceProgress) => void;
};

/** Registers (unless registered before) and deploys; resolves the version registered now, if any. */
export async function deployFromSource(
  ctl: Control,
  settings: Settings,
  d: SourceDeployment,
): Promise<RegisteredVersion | undefined> {
  const { name, task } = d;
  // A checkpoint directory (converted to GGUF at replica start) is recognised by its path.
  const digest = d.remote || statSync(d.source).isDirectory() ? undefined : await sha256(d.source);
  const versions = await listModelVersions(ctl, name);
  // A version registered for another task than the one asked for is not the same registration.
  let version = versions.find(
    (v) => (digest ? v.sha256 === digest : v.source === d.source) && (task === undefined || taskOf(v) === task),
  )?.version;
  let registered: RegisteredVersion | undefined;
  if (!version) {
    registered = await importModel(
      {
        ctl,
        artifacts: openStore(settings.artifactsUrl, settings.storage.s3),
        scratchDir: join(settings.dataDir, "tmp"),
        sources: settings.sources,
        s3: settings.storage.s3,
      },
      { name, framework: "llamacpp", source: d.source, task, onProgress: d.onProgress },
    );
    version = registered.version;
  }
  const existing = await findEndpoint(ctl, name);
  if (existing?.version !== version || existing.desired_replicas !== d.replicas) {
    const config = DeploymentConfig.parse({
      endpoint: name,
      model: { name, version },
      resources: {
        ...existing?.config.resources,
        replicas: d.replicas,
        ...(d.parallel ? { parallel: d.parallel } : {}),
      },
      runtime: existing?.config.runtime ?? {},
    });
    await deployEndpoint(ctl, config);
  }
  return registered;
}

/** The endpoint name a source gets by default: its file name without .gguf, as a valid name. */
export function endpointNameFor(source: string): string {
  const file = basename(source.split("?")[0] ?? source).replace(/\.gguf$/i, "");
  return (
    file
      .replace(/[^a-z0-9._-]/gi, "-")
      .replace(/^[^a-z0-9]+/i, "")
      .slice(0, 63) || "model"
  );
}

async function sha256(path: string): Promise<string> {
  const hash = createHash("sha256");
  await pipeline(createReadStream(path), hash);
  return hash.digest("hex");
}

/** Logs the endpoint's state each time it changes, until the endpoint is gone. */
export async function announceStates(ctl: Control, name: string, log: (line: string) => void): Promise<void> {
  let last = "";
  for (;;) {
    await new Promise((r) => setTimeout(r, 500));
    const endpoint = await getEndpoint(ctl, name).catch(() => undefined);
    if (!endpoint) return;
    const s = await endpointStatus(ctl, endpoint, { waiting: 0, active: 0 }).catch(() => undefined);
    if (!s || s.state === last) continue;
    last = s.state;
    log(
      `[endpoint] ${name}: ${s.state} (${s.replicas.ready}/${s.replicas.desired} ready)${s.errors.length ? ` — ${s.errors.join("; ")}` : ""}`,
    );
  }
}
