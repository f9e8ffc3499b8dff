#!/usr/bin/env python3
"""
Pooled perplexity as transformers computes it, the reference for the platform's perplexity
evaluations (test/integration/evaluation.test.ts). Run with the reference venv:

  .venv-ref/bin/python scripts/reference/perplexity.py CHECKPOINT DATASET.jsonl [ADAPTER_DIR]

With ADAPTER_DIR (a PEFT adapter: adapter_config.json, adapter_model.safetensors), the model is
the checkpoint with that adapter applied (peft's PeftModel), the reference for an adapter's
evaluation (`platform training evaluate <model>@<version>:<adapter>`).

Each line {"text": str} is tokenized as transformers does by default (tokenizer(text): BOS first
where the tokenizer adds one) and scored with model(input_ids, labels=input_ids): its loss is the
mean NLL over the len(ids) - 1 predicted tokens. Pooled over the file: exp(sum(loss_i * (n_i - 1)) /
sum(n_i - 1)). Prints {"perplexity", "nll", "tokens", "lines": [{"nll", "tokens"}]} as JSON. Float32.
"""
import json
import math
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    checkpoint, dataset = sys.argv[1], sys.argv[2]
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    if len(sys.argv) > 3:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, sys.argv[3])
    model = model.eval()
    lines = []
    with open(dataset, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt").input_ids
            predicted = ids.shape[1] - 1
            loss = model(ids, labels=ids).loss
            lines.append({"nll": float(loss) * predicted, "tokens": predicted})
    nll = sum(line["nll"] for line in lines)
    tokens = sum(line["tokens"] for line in lines)
    json.dump({"perplexity": math.exp(nll / tokens), "nll": nll, "tokens": tokens, "lines": lines}, sys.stdout)


if __name__ == "__main__":
    main()
