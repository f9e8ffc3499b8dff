#!/usr/bin/env python3
"""
Writes seeded random PEFT LoRA adapters on a Hugging Face checkpoint and prints what transformers +
peft generate with each of them (and with the base), greedy in float32 by the plain argmax chain
(as make-hf-fixtures.py's greedy_reference), so the suite can check the platform's serving of the
adapters token for token (test/integration/adapters.test.ts). Run with the reference venv:

  .venv-ref/bin/python scripts/reference/make-lora.py BASE_DIR OUT_DIR
  .venv-ref/bin/python scripts/reference/make-lora.py --greedy BASE_DIR [ADAPTER_DIR]

The second form makes nothing: it prints the greedy reference of the base, or of the base with an
existing PEFT adapter (a fine-tuning job's, say), on the same prompts plus one chat prompt (the
tokenizer's chat template, a generation prompt after "say red"), each output ending before EOS if
the model writes one within NEW_TOKENS: {"prompts", "new_tokens", "outputs", "min_gap"}
(test/e2e/lifecycle.test.ts).

Adapters (each lora_B non-zero and large enough that the greedy output differs from the base's):
  a1: r 4, alpha 8, q_proj + v_proj
  a2: r 8, alpha 16, q_proj + k_proj + o_proj + gate_proj + down_proj
  a3: r 2, alpha 4, use_rslora, k_proj + up_proj + down_proj, layer 1 only

stdout, one JSON object: {"prompts": [input_ids...], "new_tokens": N, "scored_ids": the first prompt
and the base's continuation, "base": {"outputs": [[ids]...], "min_gap": g, "logprobs": scored_ids'
log p(id_i | ids_<i), i >= 1}, "adapters": {"a1": {"dir", "outputs", "min_gap", "logprobs"}, ...}}.
"""
import json
import os
import sys

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

NEW_TOKENS = 12
PROMPTS = ["Once upon a time", "The little dog", "She was happy because"]
ADAPTERS = {
    "a1": dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    "a2": dict(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "o_proj", "gate_proj", "down_proj"]),
    "a3": dict(r=2, lora_alpha=4, use_rslora=True, target_modules=["k_proj", "up_proj", "down_proj"], layers_to_transform=[1]),
}


def greedy(model, input_ids, eos=None):
    """The argmax chain; with eos, it ends there as generation does (the eos not in the output)."""
    ids = list(input_ids)
    out, gaps = [], []
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            logits = model(torch.tensor([ids])).logits[0, -1]
            top = torch.topk(logits, 2)
            gaps.append(float(top.values[0] - top.values[1]))
            nxt = int(top.indices[0])
            if nxt == eos:
                break
            out.append(nxt)
            ids.append(nxt)
    return out, min(gaps)


def scored(model, ids):
    """log p(id_i | ids_<i) for i >= 1 in one float32 forward pass (log-softmax in float64): what echo with logprobs reports."""
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0].to(torch.float64), dim=-1)
    return [float(logprobs[i - 1, ids[i]]) for i in range(1, len(ids))]


def load_base(base_dir):
    return AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()


def greedy_only(base_dir, adapter_dir):
    tok = AutoTokenizer.from_pretrained(base_dir)
    prompts = [tok(p)["input_ids"] for p in PROMPTS]
    chat = tok.apply_chat_template([{"role": "user", "content": "say red"}], add_generation_prompt=True, return_dict=True)
    prompts.append(list(chat["input_ids"]))
    model = load_base(base_dir)
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(model, adapter_dir).eval()
    # A fine-tuned adapter learns to end its answers: the chain stops at EOS, as the platform's generation does.
    runs = [greedy(model, p, tok.eos_token_id) for p in prompts]
    json.dump({"prompts": prompts, "new_tokens": NEW_TOKENS, "outputs": [r[0] for r in runs],
               "min_gap": min(r[1] for r in runs)}, sys.stdout)


def main():
    if sys.argv[1] == "--greedy":
        return greedy_only(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
    base_dir, out_dir = sys.argv[1], sys.argv[2]
    tok = AutoTokenizer.from_pretrained(base_dir)
    prompts = [tok(p)["input_ids"] for p in PROMPTS]
    base = load_base(base_dir)
    runs = [greedy(base, p) for p in prompts]
    # One scored sequence: the first prompt with the base's continuation, under each model (echo's reference).
    scored_ids = prompts[0] + runs[0][0]
    result = {"prompts": prompts, "new_tokens": NEW_TOKENS, "scored_ids": scored_ids,
              "base": {"outputs": [r[0] for r in runs], "min_gap": min(r[1] for r in runs), "logprobs": scored(base, scored_ids)},
              "adapters": {}}
    for i, (name, cfg) in enumerate(ADAPTERS.items()):
        torch.manual_seed(100 + i)
        model = get_peft_model(load_base(base_dir), LoraConfig(task_type="CAUSAL_LM", lora_dropout=0.0, **cfg))
        # PEFT starts B at zero (the adapter a no-op); a served adapter must change the output.
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "lora_A" in pname or "lora_B" in pname:
                    p.copy_(torch.randn_like(p) * 0.5)
        path = os.path.join(out_dir, name)
        model.save_pretrained(path, safe_serialization=True)
        loaded = PeftModel.from_pretrained(load_base(base_dir), path).eval()
        runs = [greedy(loaded, p) for p in prompts]
        result["adapters"][name] = {"dir": path, "outputs": [r[0] for r in runs], "min_gap": min(r[1] for r in runs),
                                    "logprobs": scored(loaded, scored_ids)}
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
