/** The Images API request as the gateway reads it (src/contracts/openai/images.ts): fields, sizes, jobs. */
import { describe, expect, it } from "vitest";
import { PlatformError } from "../../src/contracts/errors.ts";
import { ImageJob } from "../../src/contracts/job.ts";
import { ImageGenerationRequest, imageJobFields, imageSize } from "../../src/contracts/openai/images.ts";

const SD15 = { default_width: 512, default_height: 512, size_multiple: 64, max_side: 1024 };

describe("ImageGenerationRequest", () => {
  it("takes OpenAI's fields and the diffusers extensions", () => {
    const body = ImageGenerationRequest.parse({
      model: "sd",
      prompt: "a cat",
      n: 2,
      size: "512x768",
      response_format: "url",
      quality: "standard",
      user: "someone",
      negative_prompt: "blurry",
      num_inference_steps: 20,
      guidance_scale: 5,
      seed: 9,
    });
    const job = ImageJob.parse({
      v: 1,
      request_id: "r",
      model: "sd",
      version: "v1",
      ...imageJobFields(body, imageSize(body.size, SD15)),
    });
    expect(job).toMatchObject({
      kind: "image",
      prompt: "a cat",
      negative_prompt: "blurry",
      width: 512,
      height: 768,
      params: { num_inference_steps: 20, guidance_scale: 5, seed: 9 },
    });
  });

  it("refuses what would change the image without being honoured, naming it", () => {
    for (const [field, value] of [
      ["strength", 0.5],
      ["style", "vivid"],
      ["quality", "hd"],
      ["output_format", "jpeg"],
      ["n", 11],
    ] as const) {
      const parsed = ImageGenerationRequest.safeParse({ model: "sd", prompt: "a cat", [field]: value });
      expect(parsed.success, field).toBe(false);
      expect(parsed.error?.issues[0]?.path).toEqual([field]);
    }
  });
});

describe("imageSize", () => {
  it("is the pipeline's default for no size or auto", () => {
    expect(imageSize(undefined, SD15)).toEqual({ width: 512, height: 512 });
    expect(imageSize("auto", SD15)).toEqual({ width: 512, height: 512 });
  });

  it("takes multiples of the pipeline's step up to its largest side, and names them otherwise", () => {
    expect(imageSize("768x1024", SD15)).toEqual({ width: 768, height: 1024 });
    for (const size of ["500x500", "2048x512", "0x512"]) {
      let error: unknown;
      try {
        imageSize(size, SD15);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(PlatformError);
      expect((error as PlatformError).status).toBe(400);
      expect((error as PlatformError).message).toContain('multiples of 64 from 64 to 1024 (e.g. "512x512"');
    }
  });
});
