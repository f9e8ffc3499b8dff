/**
 * OpenAI's Images API (POST /v1/images/generations) as this platform serves it (docs/images.md):
 * the request body, its checks against what the pipeline takes, the image jobs it becomes, and
 * the response. OpenAI's fields plus diffusers' own under their names (negative_prompt,
 * num_inference_steps, guidance_scale, seed); any other field that would change the image is a 400.
 */
import { z } from "zod";
import { PlatformError } from "../errors.ts";
import { ImageParams, MAX_IMAGE_PROMPT_CHARS } from "../picture-params.ts";
import { openAiBody } from "./common.ts";

/** OpenAI's bound on `n`. */
export const MAX_IMAGES_PER_REQUEST = 10;

const DOC = "docs/images.md";

export const ImageGenerationRequest = openAiBody(
  {
    model: z.string().min(1),
    prompt: z.string().min(1, "prompt is empty").max(MAX_IMAGE_PROMPT_CHARS),
    n: z.number().int().min(1).max(MAX_IMAGES_PER_REQUEST).nullish(),
    /** "<width>x<height>", or "auto" (the model's default size). */
    size: z
      .string()
      .regex(/^(auto|\d{1,5}x\d{1,5})$/, 'expected "<width>x<height>" (e.g. "512x512") or "auto"')
      .nullish(),
    response_format: z.enum(["b64_json", "url"]).nullish(),
    output_format: z.literal("png", { message: "only png images are made" }).nullish(),
    /** Mapped: "auto" and "standard" ask for nothing more than the request's steps; others are refused. */
    quality: z
      .enum(["auto", "standard"], {
        message: 'only "auto" and "standard" are taken (they change nothing); ask for more num_inference_steps instead',
      })
      .nullish(),
    style: z
      .null({ message: "not supported: a diffusion pipeline has no style switch; describe the style in the prompt" })
      .optional(),
    negative_prompt: z.string().max(MAX_IMAGE_PROMPT_CHARS).nullish(),
    num_inference_steps: ImageParams.shape.num_inference_steps.unwrap().nullish(),
    guidance_scale: ImageParams.shape.guidance_scale.unwrap().nullish(),
    seed: ImageParams.shape.seed.unwrap().nullish(),
  },
  DOC,
);
export type ImageGenerationRequest = z.infer<typeof ImageGenerationRequest>;

/** What a pipeline takes (registry PipelineSummary's fields). */
export type SizeRule = { default_width: number; default_height: number; size_multiple: number; max_side: number };

/** The size a request asks for, checked against the pipeline's: a 400 naming the sizes it takes. */
export function imageSize(
  size: string | null | undefined,
  rule: SizeRule | undefined,
): { width: number; height: number } {
  if (size == null || size === "auto") {
    if (!rule)
      throw new PlatformError(
        400,
        "invalid_request",
        'size: name one (e.g. "512x512"): this model\'s default size is not known',
        "size",
      );
    return { width: rule.default_width, height: rule.default_height };
  }
  const [width, height] = size.split("x").map(Number) as [number, number];
  if (!rule) return { width, height };
  const ok = (side: number) => side >= rule.size_multiple && side <= rule.max_side && side % rule.size_multiple === 0;
  if (ok(width) && ok(height)) return { width, height };
  throw new PlatformError(400, "invalid_size", `size: ${supportedSizes(rule)}`, "size");
}

/** The sizes a pipeline takes, in words, for errors and docs. */
export function supportedSizes(rule: SizeRule): string {
  const m = rule.size_multiple;
  return `this model takes "<width>x<height>" with width and height multiples of ${m} from ${m} to ${rule.max_side} (e.g. "${rule.default_width}x${rule.default_height}", its default, or "auto")`;
}

/** The job fields of an image request (one job per image: serve.ts seeds choice i with seed + i). */
export function imageJobFields(body: ImageGenerationRequest, size: { width: number; height: number }) {
  return {
    kind: "image" as const,
    prompt: body.prompt,
    ...(body.negative_prompt != null ? { negative_prompt: body.negative_prompt } : {}),
    width: size.width,
    height: size.height,
    params: {
      ...(body.num_inference_steps != null ? { num_inference_steps: body.num_inference_steps } : {}),
      ...(body.guidance_scale != null ? { guidance_scale: body.guidance_scale } : {}),
      ...(body.seed != null ? { seed: body.seed } : {}),
    },
  };
}

/** One image of the answer: OpenAI's `b64_json` or `url`, and (an extension) the random seed that made it. */
export type ImageData = { b64_json?: string; url?: string; revised_prompt?: string; seed: number };

/** OpenAI's response, with gpt-image's usage shape plus `images` and `steps`. */
export type ImagesResponse = {
  created: number;
  data: ImageData[];
  usage: {
    input_tokens: number;
    output_tokens: number;
    total_tokens: number;
    input_tokens_details: { text_tokens: number; image_tokens: number };
    images: number;
    steps: number;
  };
};
