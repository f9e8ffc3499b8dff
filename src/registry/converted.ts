/**
 * The GGUF conversion of a Hugging Face-style checkpoint, for llama.cpp replicas: made once per
 * manifest digest by the converter (src/registry/convert), kept in the artifact store under
 * converted/<digest>/model.gguf and shared like a quantized copy (src/registry/derived.ts).
 * Converting at replica start rather than at registration keeps minutes of CPU off the gateway
 * and lets a version registered before its family had a converter be served once it has one.
 */
import { convertCheckpoint } from "./convert/index.ts";
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
