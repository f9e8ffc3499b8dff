/**
 * Registering a LoRA adapter version: the import's scratch copy of a PEFT directory (uploaded, a
 * local directory, an s3:// prefix or an hf:// repository, as registry/import.ts fetches every
 * directory) checked against its base (src/models/adapter.ts), stored file by file under
 * models/<name>/<version>/ with a manifest (save.ts), and recorded as kind "adapter"; the
 * platform's own adapters (a fine-tuning job's output directory) come through import.ts's
 * `registerAdapter`.
 */
import { join } from "node:path";
import { PlatformError } from "../contracts/errors.ts";
import { adapterSummary, ADAPTER_FILES, checkAgainstBase, readAdapter, readBaseWeights } from "./adapter.ts";
import { type ImportDeps, type ImportRequest, requireKind, saveVersion, storeFetched } from "./save.ts";
import type { RegisteredVersion, VersionRef } from "./record.ts";
import { resolveModelVersion } from "./versions.ts";

/** `<model>@<version>` as a reference, or the 400 that says how to write it. */
export function parseBaseRef(base: string | undefined): VersionRef {
  const at = base?.indexOf("@") ?? -1;
  if (base === undefined || at <= 0 || at === base.length - 1)
    throw new PlatformError(
      400,
      "invalid_request",
      base === undefined
        ? "base: an adapter (a source holding adapter_config.json) needs its base version: --base <model>@<version>"
        : "base: expected <model>@<version>, e.g. --base tiny@v1",
      "base",
    );
  return { name: base.slice(0, at), version: base.slice(at + 1) };
}

/** The base version an adapter names, or a 400 saying it is not registered (an adapter cannot be a base). */
export async function resolveBase(deps: Pick<ImportDeps, "ctl">, ref: VersionRef): Promise<RegisteredVersion> {
  let base: RegisteredVersion;
  try {
    base = await resolveModelVersion(deps.ctl, ref.name, ref.version);
  } catch (e) {
    if (e instanceof PlatformError && e.code === "model_not_found")
      throw new PlatformError(
        400,
        "invalid_request",
        `base: ${ref.name}@${ref.version} is not a registered version (${e.message}); \`platform training list\` shows them`,
        "base",
      );
    throw e;
  }
  if (base.kind === "adapter")
    throw new PlatformError(
      400,
      "invalid_request",
      `base: ${ref.name}@${ref.version} is itself an adapter; name the model version it adapts`,
      "base",
    );
  if (base.task === "embed")
    throw new PlatformError(
      400,
      "invalid_request",
      `base: ${ref.name}@${ref.version} is an embedding model; adapters adapt generative models`,
      "base",
    );
  return base;
}

/** Checks, stores and records the adapter whose files (name → size, sha256) lie in `dir`. */
export async function importAdapter(
  deps: ImportDeps,
  req: ImportRequest,
  dir: string,
  files: ReadonlyMap<string, { size: number; sha256: string }>,
): Promise<RegisteredVersion> {
  const ref = parseBaseRef(req.base);
  await requireKind(deps, req.name, "adapter");
  const base = await resolveBase(deps, ref);
  if (!files.has("adapter_model.safetensors"))
    throw new PlatformError(
      400,
      "invalid_adapter",
      "adapter: the source has adapter_config.json but no adapter_model.safetensors (PyTorch .bin weights are not taken; save with safe_serialization)",
      "source",
    );
  const layout = await readAdapter(dir);
  checkAgainstBase(layout, base, await readBaseWeights(deps.artifacts, join(deps.scratchDir, "bases"), base));
  // Served by its base's engine: the base's framework is the adapter's.
  return saveVersion(
    deps.ctl,
    { ...req, framework: base.framework },
    {
      ...(await storeFetched(deps, req, dir, files, ADAPTER_FILES)),
      kind: "adapter",
      task: "generate",
      adapter: adapterSummary(layout, base),
    },
  );
}

/**
 * The newest of `versions` (one adapter's, oldest first) whose base is `base`, the version the
 * endpoint `endpoint` serves; a 404 `model_not_found` saying what is missing and how to fix it.
 */
export function pickAdapterVersion(
  versions: readonly RegisteredVersion[],
  name: string,
  base: VersionRef,
  endpoint: string,
): RegisteredVersion {
  const adapters = versions.filter((v) => v.kind === "adapter" && v.adapter);
  const newest = adapters
    .filter((v) => v.adapter?.base.name === base.name && v.adapter.base.version === base.version)
    .at(-1);
  if (newest) return newest;
  const ref = `${base.name}@${base.version}`;
  if (adapters.length === 0)
    throw new PlatformError(
      404,
      "model_not_found",
      `The adapter \`${name}\` is not registered. Register it on the version \`${endpoint}\` serves with \`platform training submit --name ${name} --base ${ref} --source <adapter directory>\`; GET /v1/models lists the adapters served here.`,
      "model",
    );
  const bases = [...new Set(adapters.map((v) => `${v.adapter?.base.name}@${v.adapter?.base.version}`))].join(", ");
  throw new PlatformError(
    404,
    "model_not_found",
    `No version of the adapter \`${name}\` adapts ${ref}, which \`${endpoint}\` serves (its versions adapt ${bases}). Deploy that base, or register a version of \`${name}\` trained on ${ref}.`,
    "model",
  );
}
