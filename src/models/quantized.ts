/**
 * The quantized copy of a model artifact, made once and shared: it lives in the artifact store
 * under quantized/<source sha256>/<TYPE>.gguf, so every replica, endpoint and version with the same
 * source bytes and type reuses it, on this node or any other. Made under a Redis lease per
 * (sha256, type) by the shared derived-file cache (src/models/derived.ts).
 */
import { readGgufInfo } from "../formats/gguf/read.ts";
import { derivedFile, type DerivedDeps, type DerivedFile } from "./derived.ts";
import { quantizeGguf } from "../formats/quantize/file.ts";
import { planQuantization, type Quantization, TARGETS } from "../formats/quantize/plan.ts";

export type QuantizedDeps = DerivedDeps;

export type QuantizedModel = DerivedFile & {
  /** The store key of the quantized copy (absent for as-is). */
  key?: string;
};

/** `sha256`: the version's digest, a hex SHA-256 (records.ts `Sha256`, checked when its record was read). */
export function quantizedKey(sha256: string, quantization: Quantization): string {
  return `quantized/${sha256}/${TARGETS[quantization].name}.gguf`;
}

/**
 * The local path of the quantized form of `source` (a local GGUF identified by `sha256`: its bytes' hash,
 * or the manifest digest of the checkpoint it was converted from), producing it if nobody has.
 */
export async function quantizedModel(
  deps: QuantizedDeps,
  source: { path: string; sha256: string },
  quantization: Quantization,
): Promise<QuantizedModel> {
  const key = quantizedKey(source.sha256, quantization);
  // Reading the header is cheap and settles "already that type" and "cannot be quantized" before any lease.
  const plan = planQuantization(await readGgufInfo(source.path), quantization);
  if (plan.kind === "as-is") {
    return { path: source.path, outcome: "as-is", detail: plan.reason };
  }
  const lock = deps.ctl.keys.quantizeLock(`${source.sha256}:${TARGETS[quantization].name}`);
  const made = await derivedFile(deps, key, lock, async (temp) => {
    const result = await quantizeGguf(source.path, temp, quantization);
    if (result.kind === "as-is") return { kind: "as-is", path: source.path, detail: result.reason };
    return {
      kind: "made",
      detail: `${result.tensorsQuantized} of ${result.tensors} tensors to ${TARGETS[quantization].name}, ${result.inputBytes} → ${result.outputBytes} bytes`,
    };
  });
  return made.outcome === "as-is" ? made : { ...made, key };
}
