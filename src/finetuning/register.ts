/**
 * Registering what a fine-tuning job trained, as a model version with its training metadata:
 * method `lora` → an adapter version tied to its base (`kind: "adapter"`); method `full` → a new
 * Hugging Face checkpoint version (through importModel, as any checkpoint directory).
 *
 * `registerTrainedAdapter` is the one place that writes an adapter version: the adapters work
 * (src/registry `registerAdapter`) checks an adapter against its base and summarises it; once it is
 * merged, this function's body becomes a call to it.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { open, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import type { Control } from "../redis/connection.ts";
import { manifestDigest, sortManifest } from "../registry/checkpoint.ts";
import { importModel } from "../registry/import.ts";
import type { AdapterSummary, ArtifactFile, RegisteredVersion, TrainingSummary } from "../registry/version.ts";
import { nextVersion, saveModelVersion } from "../registry/versions.ts";
import type { ObjectStore } from "../storage/store.ts";

export type RegisterDeps = { ctl: Control; artifacts: ObjectStore; scratchDir: string };

const ADAPTER_FILES = ["adapter_config.json", "adapter_model.safetensors"];

export async function registerTrainedAdapter(
  deps: RegisterDeps,
  req: { name: string; base: RegisteredVersion; dir: string; source: string; training: TrainingSummary },
): Promise<RegisteredVersion> {
  const config = JSON.parse(await readFile(join(req.dir, "adapter_config.json"), "utf8")) as {
    peft_type?: string;
    r?: number;
    lora_alpha?: number;
    target_modules?: string[] | string;
  };
  const manifest: ArtifactFile[] = [];
  for (const path of ADAPTER_FILES) manifest.push({ path, ...(await digestOf(join(req.dir, path))) });
  const adapter: AdapterSummary = {
    base: { name: req.base.name, version: req.base.version },
    peft_type: config.peft_type ?? "LORA",
    rank: config.r ?? 8,
    alpha: config.lora_alpha ?? 8,
    target_modules: (typeof config.target_modules === "string"
      ? [config.target_modules]
      : (config.target_modules ?? [])
    )
      .slice()
      .sort(),
    parameters: await safetensorsElements(join(req.dir, "adapter_model.safetensors")),
  };
  const version = await nextVersion(deps.ctl, req.name);
  const artifact = `models/${req.name}/${version}`;
  for (const f of manifest) await deps.artifacts.put(`${artifact}/${f.path}`, createReadStream(join(req.dir, f.path)));
  const record: RegisteredVersion = {
    name: req.name,
    version,
    framework: req.base.framework,
    source: req.source,
    artifact,
    sha256: manifestDigest(manifest),
    size_bytes: manifest.reduce((n, f) => n + f.size, 0),
    gguf: null,
    task: "generate",
    created: Date.now(),
    kind: "adapter",
    manifest: sortManifest(manifest),
    adapter,
    training: req.training,
  };
  await saveModelVersion(deps.ctl, record);
  return record;
}

/** A full fine-tune's checkpoint directory as a new version of `name`, its training metadata added. */
export async function registerTrainedModel(
  deps: RegisterDeps,
  req: { name: string; base: RegisteredVersion; dir: string; source: string; training: TrainingSummary },
): Promise<RegisteredVersion> {
  const imported = await importModel(
    { ctl: deps.ctl, artifacts: deps.artifacts, scratchDir: deps.scratchDir },
    { name: req.name, framework: req.base.framework, source: req.source, directory: { path: req.dir } },
  );
  const record: RegisteredVersion = { ...imported, training: req.training };
  await deps.ctl.redis.hset(deps.ctl.keys.modelVersions(record.name), record.version, JSON.stringify(record));
  return record;
}

async function digestOf(path: string): Promise<{ size: number; sha256: string }> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return { size: (await stat(path)).size, sha256: hash.digest("hex") };
}

/** Elements of every tensor a safetensors file holds (its JSON header's shapes). */
async function safetensorsElements(path: string): Promise<number> {
  const file = await open(path, "r");
  try {
    const head = Buffer.alloc(8);
    await file.read(head, 0, 8, 0);
    const length = Number(head.readBigUInt64LE(0));
    const json = Buffer.alloc(length);
    await file.read(json, 0, length, 8);
    const header = JSON.parse(json.toString("utf8")) as Record<string, { shape?: number[] }>;
    let n = 0;
    for (const [name, t] of Object.entries(header)) {
      if (name === "__metadata__" || !t.shape) continue;
      n += t.shape.reduce((a, b) => a * b, 1);
    }
    return n;
  } finally {
    await file.close();
  }
}
