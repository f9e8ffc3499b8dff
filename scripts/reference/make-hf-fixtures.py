#!/usr/bin/env python3
"""
Builds the Hugging Face checkpoints the GGUF converter is proven against, and what `transformers`
generates from each of them (greedy, float32), so the suite can check the platform's converted GGUF
token for token. Run with the reference venv (scripts/reference/setup.sh makes it):

  .venv-ref/bin/python scripts/reference/make-hf-fixtures.py fixtures [--stories GGUF] [--out test/fixtures/hf]
      Tiny seeded random checkpoints (Llama with GQA + tied embeddings + attention bias + linear
      RoPE scaling; Mistral in float16 with a separate head_dim; Mixtral mixture-of-experts in
      bfloat16; Qwen2 with q/k/v bias; Llama 3 style with llama3 RoPE scaling), each with a
      tokenizer and reference.json. Committed under test/fixtures/hf/. Llama, Mistral and
      Mixtral use stories260K's SentencePiece-style tokenizer (read from its GGUF, so --stories
      must exist); Qwen2 and Llama 3 tiny byte-level BPEs trained here on a few lines; llama-spm
      only a SentencePiece tokenizer.model trained here.
  .venv-ref/bin/python scripts/reference/make-hf-fixtures.py stories GGUF OUTDIR
      stories260K as a real LlamaForCausalLM directory, in four variants (float32, float32
      sharded with an index, float16, bfloat16), each with reference.json. Not committed: the
      suite runs this at test time when the venv and ../shared exist.

reference.json: {"prompt": text, "prompt_ids": tokenizer(text) without specials, "input_ids":
tokenizer(text) as transformers feeds it (BOS + prompt_ids where the tokenizer adds one), "output_ids": the
greedy continuation, "min_gap": the smallest top-1/top-2 logit gap met on the way (how far the
argmax is from a tie: float noise below it could flip a token)}.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import gguf
import numpy as np
import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

NEW_TOKENS = 24
STORIES_PROMPT = "Once upon a time"


def greedy_reference(model, input_ids, new_tokens=NEW_TOKENS):
    """Greedy tokens by full forward passes in float32 (no cache, no generate() stopping rules): the plain argmax chain."""
    model = model.to(torch.float32).eval()
    ids = list(input_ids)
    out, gaps = [], []
    with torch.no_grad():
        for _ in range(new_tokens):
            logits = model(torch.tensor([ids])).logits[0, -1]
            top = torch.topk(logits, 2)
            gaps.append(float(top.values[0] - top.values[1]))
            nxt = int(top.indices[0])
            out.append(nxt)
            ids.append(nxt)
    return out, min(gaps)


def write_reference(directory, prompt, prompt_ids, input_ids, output_ids, min_gap, extra=None):
    ref = {"prompt": prompt, "prompt_ids": prompt_ids, "input_ids": input_ids, "output_ids": output_ids, "min_gap": round(min_gap, 6)}
    if extra:
        ref.update(extra)
    with open(os.path.join(directory, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")


def load_stories(gguf_path):
    """stories260K through transformers' GGUF loader, as ENVIRONMENT.md says: its padding id (uint32 -1) is patched on a copy."""
    tmp = tempfile.mkdtemp()
    try:
        shutil.copy(gguf_path, os.path.join(tmp, "m.gguf"))
        reader = gguf.GGUFReader(os.path.join(tmp, "m.gguf"), "r+")
        field = reader.fields.get("tokenizer.ggml.padding_token_id")
        if field is not None and int(field.parts[field.data[0]][0]) >= 2**31:
            field.parts[field.data[0]][0] = 0
        del reader
        cfg = AutoConfig.from_pretrained(tmp, gguf_file="m.gguf")
        cfg.pad_token_id = None
        gguf_model = AutoModelForCausalLM.from_pretrained(tmp, gguf_file="m.gguf", config=cfg)
        tokenizer = AutoTokenizer.from_pretrained(tmp, gguf_file="m.gguf")
        tokenizer.pad_token = None
        # The GGUF does not set tokenizer.ggml.add_bos_token, so llama.cpp adds BOS (its default for
        # SentencePiece vocabularies); transformers' GGUF loader leaves it off. Say it, as the model does.
        tokenizer.add_bos_token = True
        # A GGUF-loaded model refuses save_pretrained: copy its weights into a plain one.
        model = LlamaForCausalLM(cfg)
        model.load_state_dict(gguf_model.state_dict())
        return model.eval(), tokenizer
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


STORIES_NEW_TOKENS = 30


def stories(gguf_path, out_dir):
    model, tokenizer = load_stories(gguf_path)
    prompt_ids = tokenizer(STORIES_PROMPT, add_special_tokens=False).input_ids
    input_ids = tokenizer(STORIES_PROMPT).input_ids
    assert input_ids == [model.config.bos_token_id] + prompt_ids
    variants = {
        "f32": dict(dtype=torch.float32),
        "f32-sharded": dict(dtype=torch.float32, max_shard_size="100KB"),
        "f16": dict(dtype=torch.float16),
        "bf16": dict(dtype=torch.bfloat16),
    }
    os.makedirs(out_dir, exist_ok=True)
    for name, v in variants.items():
        d = os.path.join(out_dir, name)
        shutil.rmtree(d, ignore_errors=True)
        copy = LlamaForCausalLM(model.config)
        copy.load_state_dict(model.state_dict())
        copy = copy.to(v["dtype"])
        copy.config.dtype = v["dtype"]
        kwargs = {"max_shard_size": v["max_shard_size"]} if "max_shard_size" in v else {}
        copy.save_pretrained(d, **kwargs)
        tokenizer.save_pretrained(d)
        # The reference is transformers on the saved directory itself, computed in float32 (the
        # half-precision weights are widened exactly, as llama.cpp's CPU backend does).
        reloaded = LlamaForCausalLM.from_pretrained(d, dtype=torch.float32)
        output_ids, gap = greedy_reference(reloaded, input_ids, STORIES_NEW_TOKENS)
        text = tokenizer.decode(output_ids)
        write_reference(d, STORIES_PROMPT, prompt_ids, input_ids, output_ids, gap, {"text": text})
        print(f"{name}: {text!r} (min gap {gap:.4f})")


CORPUS = """Once upon a time, there was a little girl named Lily. She loved to play outside in the park.
One day, she saw a big red ball under a tree. "Can I play with you?" asked the dog. They played all day,
and when the sun went down, Lily went home to her mom and dad. The end. 1 2 3 42 100 2024!
Tom and Ben ran to the river; the water was cold, so they laughed and jumped back. It's fun, isn't it?"""
QWEN2_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
CHATML = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
LLAMA_TEMPLATE = "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
FIXTURE_PROMPT = "Once upon a time, there was a little girl"


LLAMA3_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
LLAMA3_TEMPLATE = "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"


def byte_level_tokenizer(pattern, specials, bos=None, **tokens):
    """A byte-level BPE shaped like Qwen2's or Llama 3's (their split pattern, ByteLevel without regex), trained on a few lines.
    With `bos`, a post-processor inserts it before the text, as Llama 3's does."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=[], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([CORPUS], trainer)
    tok.add_special_tokens(specials)
    if bos is not None:
        bos_id = tok.token_to_id(bos)
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)])
        tokens["bos_token"] = bos
    return PreTrainedTokenizerFast(tokenizer_object=tok, **tokens)


def qwen2_tokenizer():
    fast = byte_level_tokenizer(QWEN2_PATTERN, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHATML
    return fast


def llama3_tokenizer():
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    fast = byte_level_tokenizer(LLAMA3_PATTERN, specials, bos="<|begin_of_text|>", eos_token="<|eot_id|>")
    fast.chat_template = LLAMA3_TEMPLATE
    return fast


def randomize(model, seed, std=0.2, embed_std=1.0):
    """Seeded weights far from transformers' small init: logits spread out, so no greedy step is a near-tie that float noise could flip."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(embed_std * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(std * torch.randn(p.shape, generator=g))
    return model.eval()


MIN_GAP = 0.05


def save_fixture(out_dir, name, build, seed, tokenizer, dtype, bos):
    """Saves the model `build(seed)` makes, trying further seeds until no greedy step is within MIN_GAP of a tie."""
    for attempt in range(20):
        if try_fixture(out_dir, name, build(seed + 1000 * attempt), tokenizer, dtype, bos):
            return
    sys.exit(f"{name}: no seed gave a greedy chain clear of ties")


def try_fixture(out_dir, name, model, tokenizer, dtype, bos):
    d = os.path.join(out_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    model.to(dtype).save_pretrained(d)
    tokenizer.save_pretrained(d)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))
    prompt_ids = tokenizer(FIXTURE_PROMPT, add_special_tokens=False).input_ids
    input_ids = tokenizer(FIXTURE_PROMPT).input_ids
    assert input_ids == ([bos] if bos is not None else []) + prompt_ids, "the tokenizer adds BOS exactly when the model has one"
    cls = type(model)
    output_ids, gap = greedy_reference(cls.from_pretrained(d, dtype=torch.float32), input_ids)
    if gap < MIN_GAP:
        return False
    write_reference(d, FIXTURE_PROMPT, prompt_ids, input_ids, output_ids, gap, {"architecture": cls.__name__})
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"{name}: {output_ids} (min gap {gap:.4f}, {size} bytes)")
    return True


def fixtures(stories_gguf, out_dir):
    torch.manual_seed(0)
    _, spm = load_stories(stories_gguf)
    spm.chat_template = LLAMA_TEMPLATE
    os.makedirs(out_dir, exist_ok=True)

    # Llama with grouped-query attention, tied embeddings, attention biases and linear RoPE scaling.
    cfg = LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
        max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=True, attention_bias=True,
        rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}, bos_token_id=1, eos_token_id=2,
    )
    save_fixture(out_dir, "llama", lambda seed, cfg=cfg: randomize(LlamaForCausalLM(cfg), seed), 1, spm, torch.float32, 1)

    # Mistral's layout with a head size that is not hidden_size / heads (llama.cpp's key_length/value_length).
    from transformers import MistralConfig, MistralForCausalLM

    cfg = MistralConfig(
        vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False, sliding_window=None,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, bos_token_id=1, eos_token_id=2,
    )
    save_fixture(out_dir, "mistral", lambda seed, cfg=cfg: randomize(MistralForCausalLM(cfg), seed), 2, spm, torch.float16, 1)

    # Mixtral: a mixture of experts (4, two used per token), stored in bfloat16.
    cfg = MixtralConfig(
        vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
        sliding_window=None, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, bos_token_id=1, eos_token_id=2,
    )
    save_fixture(out_dir, "mixtral", lambda seed, cfg=cfg: randomize(MixtralForCausalLM(cfg), seed), 3, spm, torch.bfloat16, 1)

    # Qwen2: q/k/v biases, NeoX-style RoPE, tied embeddings, a byte-level BPE tokenizer, no BOS.
    qtok = qwen2_tokenizer()
    cfg = Qwen2Config(
        vocab_size=len(qtok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, bos_token_id=None, eos_token_id=qtok.eos_token_id,
    )
    save_fixture(out_dir, "qwen2", lambda seed, cfg=cfg: randomize(Qwen2ForCausalLM(cfg), seed), 4, qtok, torch.float32, None)

    # Llama 3 style: llama3 RoPE scaling (llama.cpp's rope_freqs tensor; an original context of 64 puts the
    # head's frequencies in all three bands), untied embeddings, a byte-level BPE with Llama 3's split pattern.
    ltok = llama3_tokenizer()
    cfg = LlamaConfig(
        vocab_size=len(ltok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64, "rope_theta": 10000.0},
        bos_token_id=ltok.bos_token_id, eos_token_id=ltok.eos_token_id,
    )
    save_fixture(out_dir, "llama3", lambda seed, cfg=cfg: randomize(LlamaForCausalLM(cfg), seed), 5, ltok, torch.float32, ltok.bos_token_id)

    spm_fixture(out_dir)


def spm_fixture(out_dir, seed=6):
    """A Llama whose tokenizer is only a SentencePiece `tokenizer.model` (BPE, byte fallback) trained here: the
    converter then reads the real piece scores. sentencepiece itself is the reference tokenizer (it is what
    transformers' slow Llama tokenizer wraps; this venv lacks protobuf for transformers' own conversion)."""
    import io

    import sentencepiece as spm

    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS.split("\n") * 30), model_writer=proto, vocab_size=340, model_type="bpe",
        byte_fallback=True, normalization_rule_name="identity", minloglevel=2, hard_vocab_limit=False,
    )
    sp = spm.SentencePieceProcessor(model_proto=proto.getvalue())
    cfg = LlamaConfig(
        vocab_size=sp.vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, bos_token_id=sp.bos_id(), eos_token_id=sp.eos_id(),
    )
    d = os.path.join(out_dir, "llama-spm")
    prompt_ids = sp.encode(FIXTURE_PROMPT)
    input_ids = [sp.bos_id()] + prompt_ids
    for attempt in range(20):
        shutil.rmtree(d, ignore_errors=True)
        randomize(LlamaForCausalLM(cfg), seed + 1000 * attempt).save_pretrained(d)
        output_ids, gap = greedy_reference(LlamaForCausalLM.from_pretrained(d, dtype=torch.float32), input_ids)
        if gap >= MIN_GAP:
            break
    else:
        sys.exit("llama-spm: no seed gave a greedy chain clear of ties")
    if os.path.exists(os.path.join(d, "generation_config.json")):
        os.remove(os.path.join(d, "generation_config.json"))
    with open(os.path.join(d, "tokenizer.model"), "wb") as f:
        f.write(proto.getvalue())
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False, "chat_template": LLAMA_TEMPLATE}, f, indent=1)
    write_reference(d, FIXTURE_PROMPT, prompt_ids, input_ids, output_ids, gap, {"architecture": "LlamaForCausalLM", "pieces": [sp.id_to_piece(i) for i in range(sp.vocab_size())], "scores": [sp.get_score(i) for i in range(sp.vocab_size())]})
    print(f"llama-spm: {output_ids} (min gap {gap:.4f})")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("stories")
    s.add_argument("gguf")
    s.add_argument("out")
    f = sub.add_parser("fixtures")
    f.add_argument("--stories", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "models", "stories260K", "stories260K.gguf"))
    f.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "test", "fixtures", "hf"))
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.mode == "stories":
        stories(args.gguf, args.out)
    else:
        fixtures(args.stories, args.out)


if __name__ == "__main__":
    main()
