/**
 * The vLLM flags builder against the vLLM entry of src/contracts/engines.ts: every field that
 * entry calls applied must change the command line, and every field it reports as not applied
 * must leave it alone, so `status` never claims what `vllm serve` is not told (or hides what it is).
 */
import { describe, expect, it } from "vitest";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import { type EngineField, notApplied, VLLM } from "../../src/contracts/engines.ts";
import { vllmArgs } from "../../workers/engines/vllm-flags.ts";

/** A value for each field that differs from leaving it unset (or from its default). */
const SAMPLE: Record<EngineField, unknown> = {
  "runtime.gpu_memory_utilization": 0.8,
  "runtime.max_model_len": 4096,
  "runtime.tensor_parallel_size": 2,
  "runtime.dtype": "bfloat16",
  "runtime.quantization": "int4",
  "runtime.speculative_model": "/models/draft",
  "runtime.num_speculative_tokens": 4,
  "runtime.max_loras": 3,
  "runtime.max_lora_rank": 32,
  "resources.gpu": 2,
  "resources.gpu_type": "a100",
  "resources.memory": "16Gi",
  "resources.cpu": 8,
  "resources.parallel": 16,
};

function config(runtime: Record<string, unknown>, resources: Record<string, unknown>): DeploymentConfig {
  return DeploymentConfig.parse({ model: { name: "m" }, runtime, resources });
}

function argv(c: DeploymentConfig): string[] {
  return vllmArgs({ modelPath: "/models/m", servedName: "m", port: 8000, runtime: c.runtime, resources: c.resources });
}

describe("vLLM flags and the fields vLLM applies", () => {
  // A draft model, so that the one conditional field (num_speculative_tokens) counts as applied.
  const base = { runtime: { speculative_model: "/models/base-draft" }, resources: {} };

  for (const field of Object.keys(VLLM.fields) as EngineField[]) {
    it(field, () => {
      const [section, key] = field.split(".") as ["runtime" | "resources", string];
      const withField = { ...base, [section]: { ...base[section], [key]: SAMPLE[field] } };
      const c = config(withField.runtime, withField.resources);
      const applied = !notApplied("vllm", c).includes(field);
      const changed = argv(c).join(" ") !== argv(config(base.runtime, base.resources)).join(" ");
      expect(changed).toBe(applied);
    });
  }

  it("reports num_speculative_tokens without a draft model, and passes no speculation flag for it", () => {
    const c = config({ num_speculative_tokens: 3 }, {});
    expect(notApplied("vllm", c)).toEqual(["runtime.num_speculative_tokens"]);
    expect(argv(c)).not.toContain("--speculative-config");
  });
});
