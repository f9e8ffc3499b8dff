"""Validation loss of a registered LoRA adapter, loaded the way users load one: transformers + PEFT's
PeftModel.from_pretrained on the base checkpoint. Tokenized as the trainer tokenizes (its `encode`),
scored one example at a time; prints the mean loss per labelled token as JSON.

Usage: python peft_validation_loss.py <base dir> <adapter dir> <validation.jsonl>
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "workers", "trainer"))
import train  # noqa: E402


def main():
    base_dir, adapter_dir, valid = sys.argv[1:4]
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    model = PeftModel.from_pretrained(model, adapter_dir)
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for line in train.read_jsonl(valid):
            ids, labels = train.encode(tokenizer, line, 1024)
            logits = model(input_ids=torch.tensor([ids])).logits.float()[0, :-1]
            target = torch.tensor(labels[1:])
            total += float(torch.nn.functional.cross_entropy(logits, target, ignore_index=-100, reduction="sum"))
            count += int((target != -100).sum())
    print(json.dumps({"valid_loss": total / count}))


if __name__ == "__main__":
    main()
