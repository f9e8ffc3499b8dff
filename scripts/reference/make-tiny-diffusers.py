#!/usr/bin/env python3
"""
Builds a tiny random Stable Diffusion pipeline with diffusers itself, from configs, as diffusers' own
tests do (tests/pipelines/stable_diffusion: a small UNet2DConditionModel, AutoencoderKL, CLIP text
encoder and a tokenizer), with a fixed torch random seed, and saves it with save_pretrained
(safetensors). The image proof of the suite registers it (test/integration/images.test.ts). Run with
the reference venv:

  .venv-ref/bin/python scripts/reference/make-tiny-diffusers.py OUTDIR

The tokenizer is a CLIP BPE over a vocabulary written here (bytes, a few words, no merges beyond
them): CLIPTokenizer needs vocab.json and merges.txt, and the Hub's tiny test tokenizer is not
reachable offline. The same run gives the same files, byte for byte.
"""
import json
import os
import sys
import tempfile

import torch
from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

# Small enough to generate on CPU in well under a second per step; 32x32 latents' worth of pixels (the VAE
# downsamples by 2 with two blocks), so the default image is 64x64.
SAMPLE_SIZE = 32
WORDS = ["a", "red", "blue", "green", "cat", "dog", "house", "tree", "photo", "of", "the", "on", "in", "sky"]


def bytes_to_unicode():
    """GPT-2's byte-to-character table, which CLIP's BPE works over (as transformers defines it)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def write_tokenizer(out):
    """A CLIP tokenizer whose vocabulary is the byte alphabet (plain and end-of-word), WORDS, and the specials."""
    os.makedirs(out, exist_ok=True)
    alphabet = list(bytes_to_unicode().values())
    vocab, merges = {}, []
    for ch in alphabet:
        vocab.setdefault(ch, len(vocab))
    for ch in alphabet:
        vocab.setdefault(ch + "</w>", len(vocab))
    for word in WORDS:
        # Merge the word left to right into one token, so BPE finds it whole.
        parts = list(word[:-1]) + [word[-1] + "</w>"]
        while len(parts) > 1:
            merges.append(f"{parts[0]} {parts[1]}")
            parts = [parts[0] + parts[1]] + parts[2:]
            vocab.setdefault(parts[0], len(vocab))
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    seen, unique = set(), []
    for m in merges:
        if m not in seen:
            seen.add(m)
            unique.append(m)
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "vocab.json"), "w") as f:
            json.dump(vocab, f)
        with open(os.path.join(tmp, "merges.txt"), "w") as f:
            f.write("#version: 0.2\n" + "\n".join(unique) + "\n")
        tok = CLIPTokenizer(os.path.join(tmp, "vocab.json"), os.path.join(tmp, "merges.txt"), model_max_length=77)
        tok.save_pretrained(out)
    return len(vocab)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make-tiny-diffusers.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    tok_dir = os.path.join(out, ".tokenizer-build")
    vocab_size = write_tokenizer(tok_dir)
    tokenizer = CLIPTokenizer.from_pretrained(tok_dir)
    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(32, 64),
        layers_per_block=2,
        sample_size=SAMPLE_SIZE,
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32,
        norm_num_groups=32,
    )
    torch.manual_seed(0)
    vae = AutoencoderKL(
        block_out_channels=[32, 64],
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D", "DownEncoderBlock2D"],
        up_block_types=["UpDecoderBlock2D", "UpDecoderBlock2D"],
        latent_channels=4,
        sample_size=SAMPLE_SIZE * 2,
    )
    torch.manual_seed(0)
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            bos_token_id=vocab_size - 2,
            eos_token_id=vocab_size - 1,
            pad_token_id=vocab_size - 1,
            hidden_size=32,
            intermediate_size=37,
            layer_norm_eps=1e-05,
            num_attention_heads=4,
            num_hidden_layers=5,
            vocab_size=vocab_size,
        )
    )
    scheduler = DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    pipe = StableDiffusionPipeline(
        unet=unet,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(out, safe_serialization=True)
    for name in os.listdir(tok_dir):
        os.remove(os.path.join(tok_dir, name))
    os.rmdir(tok_dir)
    print(out)


if __name__ == "__main__":
    main()
