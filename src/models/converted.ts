/**
 * The GGUF conversion of a Hugging Face-style checkpoint, for llama.cpp replicas: made once per
 * manifest digest by the converter (src/formats/convert), kept in the artifact store under
 * converted/<digest>/model.gguf and shared like a quantized copy (src/models/derived.ts).
 * Converting at replica start rather than at registration keeps minutes of CPU off the gateway
 * and lets a version registered before its family had a converter be served once it has one.
 */
import { createHash } from "node:crypto";
import { readAdapter } from "./adapter.ts";
import { convertCheckpoint } from "../formats/convert/index.ts";
import { convertLoraAdapter } from "../formats/convert/lora.ts";
import { derivedFile, type DerivedDeps, type DerivedFile } from "./derived.ts";

/** `digest`: the version's manifest digest, a hex SHA-256 (records.ts `Sha256`, checked when its record was read). */
export function convertedKey(digest: string): string {
  return `converted/${digest}/model.gguf`;
}

/** The local path of `source`'s GGUF conversion (`dir`: the materialised checkpoint, `digest`: its manifest digest). */
export async function convertedModel(
  deps: DerivedDeps,
  source: { dir: string; digest: string },
): Promise<DerivedFile & { key: string }> {
  const key = convertedKey(source.digest);
  const made = await derivedFile(deps, key, deps.ctl.keys.convertLock(source.digest), async (temp) => {
    const result = await convertCheckpoint(source.dir, temp);
    return { kind: "made", detail: `${result.architecture} → GGUF ${result.ggufArchitecture}` };
  });
  return { ...made, key };
}

/**
 * The GGUF conversion of a LoRA adapter (`dir`: its materialised directory, `digest`: its manifest
 * digest) for the base GGUF at `basePath` (`baseSha256`: that file's identity, its version's digest
 * plus how the replica derived it): the names, permutation and shapes depend on the base, so the
 * conversion is kept per adapter and base, under converted/lora/<sha256 of both>/adapter.gguf.
 */
export async function convertedAdapter(
  deps: DerivedDeps,
  source: { dir: string; digest: string; basePath: string; baseKey: string },
): Promise<DerivedFile & { key: string }> {
  const id = createHash("sha256").update(`${source.digest}\n${source.baseKey}`).digest("hex");
  const key = `converted/lora/${id}/adapter.gguf`;
  const made = await derivedFile(deps, key, deps.ctl.keys.convertLock(id), async (temp) => {
    const layout = await readAdapter(source.dir);
    const result = await convertLoraAdapter(source.dir, source.basePath, temp, layout.ggufAlpha);
    return { kind: "made", detail: `PEFT LoRA → GGUF adapter (${result.tensors} tensors)` };
  });
  return { ...made, key };
}
