#!/usr/bin/env python3
"""
Seeded random Llama checkpoints of a realistic cost for the serving benchmarks (bench/serving.ts),
made at bench time and never committed. The tokenizer and chat template are the test fixture's
(test/fixtures/hf/llama: stories260K's 512-token vocabulary), so prompts tokenize the same on
every peer; only the shapes are a small production model's:

  75m:  12 layers, hidden 768, GQA 12/4 heads, MLP 2048           (~76M parameters)
  300m: 24 layers, hidden 1024, GQA 16/8 heads, MLP 3072          (~302M parameters)

float16, 4096 positions. The output row of EOS is zeroed (its logit is always 0, below the best
of the others), so a random model never ends an answer early and every peer decodes the same
number of tokens.

  .venv-ref/bin/python bench/models/make-llama.py SIZE OUTDIR [--seed N]
"""
import argparse
import json
import os
import shutil

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SIZES = {
    "75m": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, num_key_value_heads=4, intermediate_size=2048),
    "300m": dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16, num_key_value_heads=8, intermediate_size=3072),
}
FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "test", "fixtures", "hf", "llama")
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("size", choices=sorted(SIZES))
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=39)
    args = parser.parse_args()
    with open(os.path.join(FIXTURE, "config.json")) as f:
        fixture = json.load(f)
    torch.manual_seed(args.seed)
    config = LlamaConfig(
        vocab_size=fixture["vocab_size"],
        bos_token_id=fixture["bos_token_id"],
        eos_token_id=fixture["eos_token_id"],
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        attention_bias=False,
        **SIZES[args.size],
    )
    model = LlamaForCausalLM(config).to(torch.float16)
    with torch.no_grad():
        model.lm_head.weight[config.eos_token_id].zero_()
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out)
    for name in TOKENIZER_FILES:
        shutil.copy(os.path.join(FIXTURE, name), os.path.join(args.out, name))
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"size": args.size, "parameters": params, "dir": args.out}))


if __name__ == "__main__":
    main()
