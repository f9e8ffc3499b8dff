/**
 * `platform up --model`: the model registered (once: the same file or source again reuses its
 * version) and deployed, then its endpoint's state announced as it changes.
 */
import { createHash } from "node:crypto";
import { createReadStream, existsSync, statSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { pipeline } from "node:stream/promises";
import { fileURLToPath } from "node:url";
import { DeploymentConfig, NAME_PATTERN } from "../contracts/deployment.ts";
import { endpointStatus } from "../endpoints/status.ts";
import { deployEndpoint, findEndpoint, getEndpoint } from "../endpoints/store.ts";
import type { Control } from "../redis/connection.ts";
import { importModel } from "../registry/import.ts";
import { taskOf } from "../registry/version.ts";
import { listModelVersions } from "../registry/versions.ts";
import type { Settings } from "../settings/index.ts";
import { openStore } from "../storage/index.ts";
import { CliError } from "./errors.ts";
import { progressReporter } from "./progress.ts";
import { taskFlag } from "./training.ts";

export type ModelFlags = { model?: string; name?: string; task?: string; replicas: number; parallel?: number };

/** Registers `flags.model` unless registered before, deploys it, and resolves its endpoint name. */
export async function registerAndDeploy(ctl: Control, settings: Settings, flags: ModelFlags): Promise<string> {
  const source = flags.model as string;
  const isRemote = /^(https?|hf|s3):\/\//.test(source);
  const path = source.startsWith("file://") ? fileURLToPath(source) : resolve(source);
  if (!isRemote && !existsSync(path)) throw new CliError(`--model ${source}: no such file`);
  const name = flags.name ?? endpointNameFor(source);
  if (!NAME_PATTERN.test(name))
    throw new CliError(`--name "${name}": use letters, digits, ".", "_" or "-" (1-63 characters)`);
  const task = taskFlag(flags.task);

  // The same artifact registered before is reused rather than copied again. A checkpoint directory
  // (registered for llama.cpp, so converted to GGUF at replica start) is recognised by its path.
  const directory = !isRemote && statSync(path).isDirectory();
  const digest = isRemote || directory ? undefined : await sha256(path);
  const versions = await listModelVersions(ctl, name);
  // A version registered for another task than --task asks for is not the same registration.
  let version = versions.find(
    (v) =>
      (digest ? v.sha256 === digest : v.source === (isRemote ? source : path)) &&
      (task === undefined || taskOf(v) === task),
  )?.version;
  if (!version) {
    // A remote download can take minutes: say how far it got.
    const progress = isRemote ? progressReporter(`downloading ${name}`, process.stdout) : undefined;
    const record = await importModel(
      {
        ctl,
        artifacts: openStore(settings.artifactsUrl, settings.storage.s3),
        scratchDir: join(settings.dataDir, "tmp"),
        sources: settings.sources,
        s3: settings.storage.s3,
      },
      {
        name,
        framework: "llamacpp",
        source: isRemote ? source : path,
        task,
        onProgress: progress && ((p) => progress.update(p.received, p.total)),
      },
    ).finally(() => progress?.done());
    version = record.version;
    console.log(`registered ${name}@${version} from ${source} (task ${taskOf(record)})`);
  }
  const existing = await findEndpoint(ctl, name);
  const { replicas } = flags;
  if (existing?.version !== version || existing.desired_replicas !== replicas) {
    const config = DeploymentConfig.parse({
      endpoint: name,
      model: { name, version, framework: "llamacpp" },
      resources: {
        ...existing?.config.resources,
        replicas,
        ...(flags.parallel ? { parallel: flags.parallel } : {}),
      },
      runtime: existing?.config.runtime ?? {},
    });
    await deployEndpoint(ctl, config);
  }
  return name;
}

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
export async function announceWhenAvailable(ctl: Control, name: string, log: (line: string) => void): Promise<void> {
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
