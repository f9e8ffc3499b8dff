#!/usr/bin/env python3
"""
What diffusers itself makes of a prompt, for the image proof (test/integration/images.test.ts): the
pipeline directory is loaded with DiffusionPipeline.from_pretrained in float32 on the CPU and called
directly, one image per call, with a torch.Generator seeded by the request's random seed.

  .venv-ref/bin/python scripts/reference/diffusers-reference.py PIPELINE_DIR '<json>' [PNG ...]

<json>: {"prompt", "negative_prompt"?, "width", "height", "steps", "guidance", "seed"}. Prints one JSON
line: {"png": <base64 of diffusers' image>, "compared": [{"max_diff", "differing"} per PNG given]},
where max_diff is the largest difference of a channel value (0-255) between diffusers' image and
that PNG, and differing how many channel values differ. With "batch": [seed, ...] in the JSON
instead, it also calls the pipeline once with every seed (a generator each) and reports
"batched_identical": whether each image equals the one its seed makes alone.
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
    else:
        pixels, images = call(pipe, req, [req["seed"]])
        buf = io.BytesIO()
        images[0].save(buf, format="PNG")
        result["png"] = base64.b64encode(buf.getvalue()).decode("ascii")
        result["compared"] = []
        for path in sys.argv[3:]:
            other = np.asarray(Image.open(path).convert("RGB"), dtype=np.int16)
            if other.shape != pixels[0].shape:
                result["compared"].append({"max_diff": 255, "differing": -1, "shape": list(other.shape)})
                continue
            diff = np.abs(other - pixels[0])
            result["compared"].append({"max_diff": int(diff.max()), "differing": int((diff > 0).sum())})
    print(json.dumps(result))


if __name__ == "__main__":
    main()
