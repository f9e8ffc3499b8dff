/** The LoRA converter's naming (src/formats/convert/lora.ts): PEFT tensor pairs and llama.cpp's weight names. */
import { describe, expect, it } from "vitest";
import { ggufWeightName, hfWeightName, LoraError, pairTensors } from "../../src/formats/convert/lora.ts";

describe("LoRA tensor names", () => {
  it("maps the attention and MLP projections to llama.cpp's names and back", () => {
    const cases: [string, string][] = [
      ["model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight"],
      ["model.layers.3.self_attn.k_proj.weight", "blk.3.attn_k.weight"],
      ["model.layers.3.self_attn.v_proj.weight", "blk.3.attn_v.weight"],
      ["model.layers.12.self_attn.o_proj.weight", "blk.12.attn_output.weight"],
      ["model.layers.1.mlp.gate_proj.weight", "blk.1.ffn_gate.weight"],
      ["model.layers.1.mlp.up_proj.weight", "blk.1.ffn_up.weight"],
      ["model.layers.1.mlp.down_proj.weight", "blk.1.ffn_down.weight"],
    ];
    for (const [hf, gguf] of cases) {
      expect(ggufWeightName(hf)).toBe(gguf);
      expect(hfWeightName(gguf)).toBe(hf);
    }
  });

  it("has no llama.cpp name for embeddings, lm_head, or a projection under the wrong block", () => {
    expect(ggufWeightName("model.embed_tokens.weight")).toBeUndefined();
    expect(ggufWeightName("lm_head.weight")).toBeUndefined();
    expect(ggufWeightName("model.layers.0.mlp.q_proj.weight")).toBeUndefined();
    expect(hfWeightName("blk.0.attn_norm.weight")).toBeUndefined();
  });

  it("pairs lora_A with lora_B per base weight, PEFT's prefix removed", () => {
    const pairs = pairTensors([
      "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight",
      "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
    ]);
    expect(pairs).toEqual([
      {
        base: "model.layers.0.self_attn.q_proj.weight",
        a: "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
        b: "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight",
        rank: 0,
      },
    ]);
  });

  it("refuses a lone half of a pair, an embedding adapter and a full module copy, naming the tensor", () => {
    expect(() => pairTensors(["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"])).toThrow(
      "model.layers.0.self_attn.q_proj.weight has a lora_A without its lora_B",
    );
    expect(() => pairTensors(["base_model.model.model.embed_tokens.lora_embedding_A"])).toThrow(LoraError);
    expect(() => pairTensors(["base_model.model.lm_head.modules_to_save.default.weight"])).toThrow("modules_to_save");
  });
});
