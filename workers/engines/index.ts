/** Picks and loads the engine an endpoint's framework names. */
import type { EndpointRecord } from "../../src/contracts/records.ts";
import type { Engine } from "./engine.ts";
import { loadLlamaCpp } from "./llamacpp.ts";

export async function loadEngine(endpoint: EndpointRecord, modelPath: string): Promise<Engine> {
  const { runtime, resources } = endpoint.config;
  if (endpoint.framework === "vllm") {
    const { loadVllm } = await import("./vllm.ts");
    return loadVllm({ modelPath, runtime, resources, servedName: endpoint.name });
  }
  return loadLlamaCpp({
    modelPath,
    parallel: resources.parallel,
    threads: resources.cpu,
    contextSize: runtime.max_model_len,
    gpu: (resources.gpu ?? 0) > 0,
  });
}
