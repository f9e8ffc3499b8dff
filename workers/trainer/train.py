"""The fine-tuning trainer: a child process of the trainer worker (workers/trainer/child.ts).

Trains a Hugging Face causal LM on a validated JSONL dataset (docs/fine-tuning.md): method `lora`
(a PEFT LoRA adapter of the base) or `full` (every weight). Loss counts only the tokens the model
should learn to write: assistant turns of chat lines, the completion of prompt/completion lines.

A plain PyTorch loop rather than trl's SFTTrainer: the loop has to checkpoint and resume bit for
bit (data order, optimizer, scheduler, RNG) and to stream each step's loss as a JSON line the
Node side turns into events, and trl's Trainer callbacks and resume rules make both indirect.

Stdout carries only JSON lines: {"type": "step"|"valid"|"checkpoint"|"done", ...}. Errors go to
stderr and the exit status is non-zero. Same seed, same inputs, same thread count: same weights,
whether or not the run was interrupted and resumed from a checkpoint.
"""

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import sys

import torch

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "vocab.txt",
    "merges.txt",
    "vocab.json",
    "added_tokens.json",
    "generation_config.json",
)


def emit(kind, **fields):
    sys.stdout.write(json.dumps({"type": kind, **fields}) + "\n")
    sys.stdout.flush()


def fail(code, message):
    """An error the job shows as it is (it names no path and quotes no data), then exit status 3."""
    emit("error", code=code, message=message)
    sys.exit(3)


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--base", required=True, help="the base checkpoint directory")
    p.add_argument("--train", required=True)
    p.add_argument("--valid")
    p.add_argument("--out", required=True, help="where the result (adapter or model) is written")
    p.add_argument("--checkpoints", required=True, help="directory of step-<n> checkpoints")
    p.add_argument("--resume", help="a checkpoint directory to continue from")
    p.add_argument("--method", choices=["lora", "full"], default="lora")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--lora-alpha", type=float, default=16)
    p.add_argument("--target-modules", default="q_proj,v_proj")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-every", type=int, default=0, help="steps between checkpoints (0: epoch ends only)")
    p.add_argument("--max-seq-len", type=int, default=1024)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--adapter-base", default="", help="written as the adapter's base_model_name_or_path")
    p.add_argument("--step-delay", type=float, default=0.0, help="seconds to sleep after each step (tests)")
    return p.parse_args()


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def render(tokenizer, messages):
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False)
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages)


def encode(tokenizer, line, max_len):
    """Token ids and labels (-100 where no loss is taken) of one dataset line."""
    ids, labels = [], []
    if "messages" in line:
        messages = line["messages"]
        before = ""
        for i, m in enumerate(messages):
            # Each message's share of the rendered conversation: the template may put text between turns.
            text = render(tokenizer, messages[: i + 1])
            part = text[len(before) :] if text.startswith(before) else text
            before = text
            piece = tokenizer(part, add_special_tokens=False)["input_ids"]
            ids += piece
            labels += piece if m["role"] == "assistant" else [-100] * len(piece)
    else:
        prompt = tokenizer(line["prompt"], add_special_tokens=True)["input_ids"]
        completion = tokenizer(line["completion"], add_special_tokens=False)["input_ids"]
        if tokenizer.eos_token_id is not None:
            completion = completion + [tokenizer.eos_token_id]
        ids = prompt + completion
        labels = [-100] * len(prompt) + completion
    return ids[:max_len], labels[:max_len]


def collate(examples, pad_id):
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (ids, lab) in enumerate(examples):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, : len(lab)] = torch.tensor(lab)
        mask[row, : len(ids)] = 1
    return input_ids, labels, mask


def token_loss(model, batch, device):
    """Summed cross-entropy over the labelled tokens, and their count."""
    input_ids, labels, mask = (t.to(device) for t in batch)
    logits = model(input_ids=input_ids, attention_mask=mask).logits.float()
    shift_logits = logits[:, :-1, :].reshape(-1, logits.size(-1))
    shift_labels = labels[:, 1:].reshape(-1)
    total = torch.nn.functional.cross_entropy(shift_logits, shift_labels, ignore_index=-100, reduction="sum")
    return total, int((shift_labels != -100).sum())


def validation_loss(model, examples, batch_size, pad_id, device):
    if not examples:
        return None
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            s, n = token_loss(model, collate(examples[i : i + batch_size], pad_id), device)
            total += float(s)
            count += n
    model.train()
    return total / count if count else None


def epoch_order(n, seed, epoch):
    g = torch.Generator()
    g.manual_seed(seed * 1000003 + epoch)
    return torch.randperm(n, generator=g).tolist()


def trainable_state(model, method):
    if method == "lora":
        from peft import get_peft_model_state_dict

        return get_peft_model_state_dict(model)
    return model.state_dict()


def save_checkpoint(args, model, optimizer, scheduler, state):
    from safetensors.torch import save_file

    final = os.path.join(args.checkpoints, f"step-{state['step']:08d}")
    tmp = final + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    weights = {k: v.detach().cpu().contiguous() for k, v in trainable_state(model, args.method).items()}
    if args.method == "full":
        # Tied embeddings share storage; safetensors refuses shared tensors, so the tie is saved once.
        seen = {}
        for k in list(weights):
            ptr = weights[k].data_ptr()
            if ptr in seen:
                del weights[k]
            seen[ptr] = k
    save_file(weights, os.path.join(tmp, "weights.safetensors"))
    torch.save(
        {
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": {
                "torch": torch.get_rng_state(),
                "python": random.getstate(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            },
        },
        os.path.join(tmp, "trainer_state.pt"),
    )
    with open(os.path.join(tmp, "state.json"), "w") as f:
        json.dump(state, f)
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    return final


def load_checkpoint(path, model, optimizer, scheduler, method):
    from safetensors.torch import load_file

    weights = load_file(os.path.join(path, "weights.safetensors"))
    if method == "lora":
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, weights)
    else:
        model.load_state_dict(weights, strict=False)
        if getattr(model.config, "tie_word_embeddings", False):
            model.tie_weights()
    saved = torch.load(os.path.join(path, "trainer_state.pt"), weights_only=False)
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    torch.set_rng_state(saved["rng"]["torch"])
    random.setstate(saved["rng"]["python"])
    if saved["rng"].get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(saved["rng"]["cuda"])
    with open(os.path.join(path, "state.json")) as f:
        return json.load(f)


def save_result(args, model, tokenizer_dir):
    os.makedirs(args.out, exist_ok=True)
    if args.method == "lora":
        model.save_pretrained(args.out, safe_serialization=True)
        # PEFT writes the base's local path (a server path) and a model card: the base is named by the platform instead.
        config_path = os.path.join(args.out, "adapter_config.json")
        with open(config_path) as f:
            config = json.load(f)
        config["base_model_name_or_path"] = args.adapter_base or None
        # PEFT keeps target modules in a set: its order would change with Python's hash seed.
        if isinstance(config.get("target_modules"), list):
            config["target_modules"] = sorted(config["target_modules"])
        with open(config_path, "w") as f:
            json.dump(config, f, indent=2, sort_keys=True)
        readme = os.path.join(args.out, "README.md")
        if os.path.exists(readme):
            os.remove(readme)
    else:
        model.save_pretrained(args.out, safe_serialization=True)
        for name in TOKENIZER_FILES:
            src = os.path.join(tokenizer_dir, name)
            if os.path.isfile(src):
                shutil.copyfile(src, os.path.join(args.out, name))


def digest_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def exit_with_parent():
    """A trainer that dies (SIGKILL) cannot kill its child: the child notices and ends itself."""
    import threading
    import time

    parent = os.getppid()

    def watch():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def main():
    args = parse_args()
    exit_with_parent()
    torch.set_num_threads(max(1, args.threads))
    torch.use_deterministic_algorithms(True, warn_only=True)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = args.device if args.device != "cuda" or torch.cuda.is_available() else "cpu"

    from transformers import AutoModelForCausalLM, AutoTokenizer, get_linear_schedule_with_warmup

    tokenizer = AutoTokenizer.from_pretrained(args.base)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    train = [encode(tokenizer, line, args.max_seq_len) for line in read_jsonl(args.train)]
    valid = [encode(tokenizer, line, args.max_seq_len) for line in read_jsonl(args.valid)] if args.valid else []
    train = [e for e in train if any(l != -100 for l in e[1][1:])]
    if not train:
        fail("no_trainable_tokens", "no training example has an assistant or completion token to learn from")

    model = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32)
    if args.method == "lora":
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(
            r=args.lora_rank,
            lora_alpha=args.lora_alpha,
            target_modules=[m for m in args.target_modules.split(",") if m],
            lora_dropout=0.0,
            bias="none",
            task_type="CAUSAL_LM",
        )
        # Seeded just before: the adapter's A matrices are drawn here.
        torch.manual_seed(args.seed)
        model = get_peft_model(model, config)
    model.to(device)
    model.train()

    steps_per_epoch = math.ceil(len(train) / args.batch_size)
    total_steps = steps_per_epoch * args.epochs
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.learning_rate, weight_decay=0.0)
    scheduler = get_linear_schedule_with_warmup(optimizer, 0, total_steps)

    emit(
        "plan",
        total_steps=total_steps,
        steps_per_epoch=steps_per_epoch,
        examples=len(train),
        device=device,
        requested_device=args.device,
    )

    state = {"step": 0, "epoch": 0, "trained_tokens": 0, "last_train_loss": None, "initial_valid_loss": None}
    if args.resume:
        state = load_checkpoint(args.resume, model, optimizer, scheduler, args.method)
        emit("resumed", step=state["step"], epoch=state["epoch"])
    else:
        state["initial_valid_loss"] = validation_loss(model, valid, args.batch_size, pad_id, device)
        if state["initial_valid_loss"] is not None:
            emit("valid", step=0, epoch=0, valid_loss=state["initial_valid_loss"])

    import time

    valid_loss = state.get("last_valid_loss")
    while state["step"] < total_steps:
        epoch = state["step"] // steps_per_epoch
        order = epoch_order(len(train), args.seed, epoch)
        at = state["step"] % steps_per_epoch
        idx = order[at * args.batch_size : (at + 1) * args.batch_size]
        batch = collate([train[i] for i in idx], pad_id)
        total, count = token_loss(model, batch, device)
        loss = total / max(count, 1)
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        state["step"] += 1
        state["trained_tokens"] += int(batch[2].sum())
        state["last_train_loss"] = float(loss.detach())
        state["epoch"] = state["step"] / steps_per_epoch
        emit(
            "step",
            step=state["step"],
            total_steps=total_steps,
            epoch=state["epoch"],
            train_loss=state["last_train_loss"],
            learning_rate=scheduler.get_last_lr()[0],
            trained_tokens=state["trained_tokens"],
        )
        epoch_end = state["step"] % steps_per_epoch == 0
        if epoch_end:
            valid_loss = validation_loss(model, valid, args.batch_size, pad_id, device)
            state["last_valid_loss"] = valid_loss
            if valid_loss is not None:
                emit("valid", step=state["step"], epoch=state["epoch"], valid_loss=valid_loss)
        every = args.checkpoint_every > 0 and state["step"] % args.checkpoint_every == 0
        if (epoch_end or every) and state["step"] < total_steps:
            path = save_checkpoint(args, model, optimizer, scheduler, state)
            emit(
                "checkpoint",
                step=state["step"],
                path=path,
                train_loss=state["last_train_loss"],
                valid_loss=valid_loss if epoch_end else None,
            )
        if args.step_delay > 0:
            time.sleep(args.step_delay)

    save_result(args, model, args.base)
    weights = os.path.join(args.out, "adapter_model.safetensors" if args.method == "lora" else "model.safetensors")
    emit(
        "done",
        step=state["step"],
        trained_tokens=state["trained_tokens"],
        final_train_loss=state["last_train_loss"],
        final_valid_loss=state.get("last_valid_loss"),
        initial_valid_loss=state["initial_valid_loss"],
        weights_sha256=digest_of(weights) if os.path.isfile(weights) else None,
    )


if __name__ == "__main__":
    try:
        main()
    except torch.cuda.OutOfMemoryError:
        fail("out_of_memory", "the GPU ran out of memory; use a smaller batch_size (or method lora)")
    except MemoryError:
        fail("out_of_memory", "the trainer ran out of memory; use a smaller batch_size (or method lora)")
