#!/usr/bin/env python3
"""
Prompt log-likelihoods as transformers computes them, the reference for the platform's echo with
logprobs (test/integration/echo-logprobs.test.ts). Run with the reference venv:

  .venv-ref/bin/python scripts/reference/prompt-logprobs.py CHECKPOINT < items.json

items.json: a list of {"text": str} (tokenized as transformers feeds it: BOS first where the
tokenizer adds one) or {"ids": [int, ...]} (evaluated as given). Prints a JSON list, one entry per
item: {"input_ids", "logprobs": [null, then log p(id_i | ids_<i) for i >= 1], "top": [null, then the
largest log probability at each position]}. One forward pass in float32 over the whole sequence
(causal, so position i - 1 sees exactly ids_<i); log-softmax in float64.
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    checkpoint = sys.argv[1]
    items = json.load(sys.stdin)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for item in items:
            ids = item["ids"] if "ids" in item else tokenizer(item["text"]).input_ids
            logits = model(torch.tensor([ids])).logits[0].to(torch.float64)
            logprobs = torch.log_softmax(logits, dim=-1)
            chosen = [None] + [float(logprobs[i - 1, ids[i]]) for i in range(1, len(ids))]
            top = [None] + [float(logprobs[i - 1].max()) for i in range(1, len(ids))]
            out.append({"input_ids": ids, "logprobs": chosen, "top": top})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
