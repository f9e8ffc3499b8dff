/**
 * Registering what a fine-tuning job trained, as a model version with its training metadata:
 * method `lora` → an adapter version tied to its base (`kind: "adapter"`, checked against the base
 * as any uploaded adapter is: src/models/adapter-register.ts); method `full` → a new Hugging Face
 * checkpoint version (through importModel, as any checkpoint directory).
 */
import { registerAdapter } from "../models/import.ts";
import { importModel } from "../models/import.ts";
import type { RegisteredVersion, TrainingSummary } from "../models/record.ts";
import type { Control } from "../redis/connection.ts";
import type { ObjectStore } from "../storage/store.ts";

export type RegisterDeps = { ctl: Control; artifacts: ObjectStore; scratchDir: string };

/** `owner`: the job's organization, which the result's name belongs to (src/models/owners.ts). */
type Trained = {
  name: string;
  base: RegisteredVersion;
  dir: string;
  source: string;
  training: TrainingSummary;
  owner: string;
};

export function registerTrainedAdapter(deps: RegisterDeps, req: Trained): Promise<RegisteredVersion> {
  return registerAdapter(deps, {
    name: req.name,
    base: { name: req.base.name, version: req.base.version },
    dir: req.dir,
    training: req.training,
    owner: req.owner,
  });
}

/** A full fine-tune's checkpoint directory as a new version of `name`, its training metadata added. */
export function registerTrainedModel(deps: RegisterDeps, req: Trained): Promise<RegisteredVersion> {
  return importModel(deps, {
    name: req.name,
    framework: req.base.framework,
    source: req.source,
    directory: { path: req.dir },
    training: req.training,
    owner: req.owner,
  });
}
