#!/usr/bin/env python3
"""
What diffusers itself makes of a prompt, for the image proof (test/integration/images.test.ts): the
pipeline directory is loaded with DiffusionPipeline.from_pretrained in float32 on the CPU and called
directly, one image per call (several with "batch", below), with a torch.Generator seeded by the
request's random seed.

  .venv-ref/bin/python scripts/reference/diffusers-reference.py PIPELINE_DIR '<json>' [PNG ...]

<json>: {"prompt", "negative_prompt"?, "width", "height", "steps", "guidance", "seed"}. Prints one JSON
line: {"png": <base64 of diffusers' image>, "compared": [{"max_diff", "differing"} per PNG given]},
where max_diff is the largest difference of a channel value (0-255) between diffusers' image and
that PNG, and differing how many channel values differ.

With "batch": [seed, ...] in the JSON instead of "seed", it calls the pipeline once with every seed
(a generator each, in that order: what a replica with PLATFORM_IMAGES_MAX_BATCH does,
test/integration/images-batching.test.ts) and once per seed alone, and prints {"batched_identical":
whether each batched image equals the one its seed makes alone, "batched_max_diff": the largest
channel difference between them, "compared": [{"max_diff", "differing"} per PNG given]}, the i-th PNG
compared with the i-th image of the batched call.
"""
import base64
import io
import json
import sys
import warnings

import numpy as np
import torch
from diffusers import DiffusionPipeline
from PIL import Image

# torch_dtype, which every diffusers release takes; newer ones also name it dtype and warn about the old name.
warnings.filterwarnings("ignore", message=".*torch_dtype.*")


def call(pipe, req, seeds):
    kwargs = {}
    if req.get("negative_prompt") is not None:
        kwargs["negative_prompt"] = [req["negative_prompt"]] * len(seeds)
    out = pipe(
        prompt=[req["prompt"]] * len(seeds),
        width=req["width"],
        height=req["height"],
        num_inference_steps=req["steps"],
        guidance_scale=req["guidance"],
        generator=[torch.Generator(device="cpu").manual_seed(s) for s in seeds],
        output_type="pil",
        **kwargs,
    )
    return [np.asarray(im.convert("RGB"), dtype=np.int16) for im in out.images], out.images


def compare(path, pixels):
    """The PNG at `path` against diffusers' image `pixels`: the largest channel difference, how many differ."""
    other = np.asarray(Image.open(path).convert("RGB"), dtype=np.int16)
    if other.shape != pixels.shape:
        return {"max_diff": 255, "differing": -1, "shape": list(other.shape)}
    diff = np.abs(other - pixels)
    return {"max_diff": int(diff.max()), "differing": int((diff > 0).sum())}


def main():
    pipe = DiffusionPipeline.from_pretrained(sys.argv[1], torch_dtype=torch.float32, local_files_only=True)
    pipe.set_progress_bar_config(disable=True)
    req = json.loads(sys.argv[2])
    result = {}
    if "batch" in req:
        seeds = req["batch"]
        together, _ = call(pipe, req, seeds)
        alone = [call(pipe, req, [s])[0][0] for s in seeds]
        result["batched_identical"] = all(np.array_equal(a, b) for a, b in zip(together, alone))
        result["batched_max_diff"] = max(int(np.abs(a - b).max()) for a, b in zip(together, alone))
        paths = sys.argv[3:]
        if len(paths) > len(seeds):
            sys.exit(f"{len(paths)} PNGs for a batch of {len(seeds)} seeds: give at most one PNG per seed, in order")
        result["compared"] = [compare(path, pixels) for path, pixels in zip(paths, together)]
    else:
        pixels, images = call(pipe, req, [req["seed"]])
        buf = io.BytesIO()
        images[0].save(buf, format="PNG")
        result["png"] = base64.b64encode(buf.getvalue()).decode("ascii")
        result["compared"] = [compare(path, pixels[0]) for path in sys.argv[3:]]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
