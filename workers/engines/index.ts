/** Picks and loads the engine an endpoint's framework names. */
import type { Endpoint } from "../../src/endpoints/record.ts";
import type { EngineSettings, PicturesSettings, VllmSettings } from "../../src/settings/index.ts";
import type { Engine } from "./engine.ts";
import { loadLlamaCpp } from "./llamacpp.ts";

/**
 * `vllm`: the worker's settings.vllm (executable, start timeout); `draftModelPath`: llama.cpp's draft
 * model, when speculating; `grammarTimeoutMs`: llama.cpp's budget for building one schema's grammar.
 */
export async function loadEngine(
  endpoint: Endpoint,
  modelPath: string,
  extra: {
    vllm?: VllmSettings;
    images?: PicturesSettings;
    draftModelPath?: string;
    grammarTimeoutMs?: number;
    vllmLora?: boolean;
    /** Which llama.cpp CPU binary (settings.engine). */
    llamaBinary?: EngineSettings;
  } = {},
): Promise<Engine> {
  const vllm = extra.vllm;
  const { runtime, resources } = endpoint.config;
  if (endpoint.framework === "diffusers") {
    const { loadDiffusers } = await import("./diffusers.ts");
    const images = extra.images;
    return loadDiffusers({
      modelPath,
      python: images?.python ?? "python3",
      parallel: resources.parallel,
      gpu: (resources.gpu ?? 0) > 0,
      dtype: runtime.dtype,
      threads: resources.cpu,
      maxBatch: images?.maxBatch,
      startTimeoutMs: images?.startTimeoutMs,
    });
  }
  if (endpoint.framework === "vllm") {
    const { loadVllm } = await import("./vllm.ts");
    return loadVllm({
      modelPath,
      runtime,
      resources,
      servedName: endpoint.name,
      lora: extra.vllmLora,
      bin: vllm?.bin,
      startTimeoutMs: vllm?.startTimeoutMs,
    });
  }
  return loadLlamaCpp({
    modelPath,
    parallel: resources.parallel,
    threads: resources.cpu,
    contextSize: runtime.max_model_len,
    gpu: (resources.gpu ?? 0) > 0,
    float32: runtime.dtype === "float32" || runtime.dtype === "float",
    maxLoras: runtime.max_loras,
    grammarTimeoutMs: extra.grammarTimeoutMs,
    binary: extra.llamaBinary,
    draft:
      extra.draftModelPath === undefined
        ? undefined
        : { modelPath: extra.draftModelPath, tokens: runtime.num_speculative_tokens },
  });
}
