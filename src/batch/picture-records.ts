/**
 * Image records of a batch job (docs/batch.md, "Image records"): the JSONL line an image model's
 * job reads, the output line it writes, and where each record's PNG goes: in the folder named as
 * the result beside it (`<job id>/<record id>.png` beside `<job id>.jsonl`), copied there from the
 * artifact store where the replica wrote it. Output lines name each PNG relative to the result, so
 * the names hold wherever the result is read: in the output location, or downloaded beside it.
 */
import { posix } from "node:path";
import { z } from "zod";
import { describeIssues } from "../contracts/issues.ts";
import { ImageParams, MAX_IMAGE_PROMPT_CHARS } from "../contracts/picture-params.ts";
import { imageSize, type SizeRule } from "../contracts/openai/images.ts";
import { isPictureKey } from "../pictures/keys.ts";
import { isStorageError, type ObjectStore } from "../storage/index.ts";
import { failedEntry, idOf, jsonObject } from "./input.ts";
import type { LineFormat, Outcome } from "./lines.ts";

/** A record id that names its PNG: a file name, nothing that could reach outside the output location. */
const IMAGE_RECORD_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
/** A PNG's name in an output line, relative to the result: `<result's name>/<record id>.png`. */
export const PICTURE_REFERENCE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,254}\/[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.png$/;

/** One line of an image model's input: the fields of POST /v1/images/generations that make one image. */
export const PictureInputLine = z
  .object({
    id: z
      .string()
      .regex(
        IMAGE_RECORD_ID,
        "an image record's id names its PNG: 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit",
      )
      .optional(),
    prompt: z.string().min(1, "prompt is empty").max(MAX_IMAGE_PROMPT_CHARS),
    negative_prompt: z.string().max(MAX_IMAGE_PROMPT_CHARS).optional(),
    size: z
      .string()
      .regex(/^(auto|\d{1,5}x\d{1,5})$/, 'expected "<width>x<height>" (e.g. "512x512") or "auto"')
      .optional(),
    /** One image per record: repeat the record (other id, other seed) for more. */
    n: z
      .literal(1, { message: "one image per record: repeat the record with another id (and seed) for more" })
      .optional(),
    num_inference_steps: ImageParams.shape.num_inference_steps,
    guidance_scale: ImageParams.shape.guidance_scale,
    seed: ImageParams.shape.seed,
  })
  .strict();

/** The platform's own lines for an image model: `pipeline` says which sizes it takes. */
export function pictureFormat(pipeline: SizeRule | undefined): LineFormat {
  return {
    parse(line) {
      const n = line.lineNumber;
      const object = jsonObject(line, '{"id", "prompt", "size", "seed"}');
      if ("failure" in object) return object.failure;
      const id = idOf(object.value.id, n);
      const parsed = PictureInputLine.safeParse(object.value);
      if (!parsed.success) return failedEntry(n, id, "invalid_record", describeIssues(parsed.error as z.ZodError));
      const r = parsed.data;
      let size: { width: number; height: number };
      try {
        size = imageSize(r.size, pipeline);
      } catch (e) {
        return failedEntry(n, id, "invalid_size", (e as Error).message);
      }
      const params: ImageParams = {
        ...(r.num_inference_steps !== undefined ? { num_inference_steps: r.num_inference_steps } : {}),
        ...(r.guidance_scale !== undefined ? { guidance_scale: r.guidance_scale } : {}),
        ...(r.seed !== undefined ? { seed: r.seed } : {}),
      };
      const work = {
        kind: "image" as const,
        image: {
          prompt: r.prompt,
          ...(r.negative_prompt !== undefined ? { negative_prompt: r.negative_prompt } : {}),
          ...size,
          params,
        },
      };
      return { ok: true, line: n, id, work, params: {} };
    },
    render: (record, outcome) => pictureOutputLine(record.id, outcome),
  };
}

export function pictureOutputLine(id: string, outcome: Outcome): string {
  if (!outcome.ok)
    return JSON.stringify({ id, status: "error", error: { code: outcome.code, message: outcome.message } });
  const image = outcome.image;
  return JSON.stringify({
    id,
    status: "success",
    image: image?.uri ?? null,
    seed: image?.seed,
    steps: image?.steps,
    width: image?.width,
    height: image?.height,
    tokens_used: outcome.tokens,
  });
}

/** Record `id`'s PNG relative to the result: in the folder named as the result, less `.jsonl`. */
export function pictureReference(resultKey: string, id: string): string {
  return `${posix.basename(resultKey).replace(/\.jsonl$/i, "")}/${id}.png`;
}

/** Where record `id`'s PNG goes: its reference, beside the result object (`resultKey`). */
export function pictureOutputKey(resultKey: string, id: string): string {
  const dir = posix.dirname(resultKey);
  const reference = pictureReference(resultKey, id);
  return dir === "." ? reference : `${dir}/${reference}`;
}

/**
 * Moves a record's PNG from the artifact store to the output: copied, then removed from the
 * artifacts. Idempotent: a run resumed after the copy (the artifact gone, the PNG in place) finds
 * it there. The outcome then names the PNG relative to the result instead of the artifact key.
 */
export async function placePicture(
  artifacts: ObjectStore,
  out: { store: ObjectStore; resultKey: string },
  id: string,
  outcome: Outcome,
): Promise<Outcome> {
  if (!outcome.ok || !outcome.image?.key) return outcome;
  const { key, ...image } = outcome.image;
  const dest = pictureOutputKey(out.resultKey, id);
  const placed: Outcome = { ...outcome, image: { ...image, uri: pictureReference(out.resultKey, id) } };
  if (!isPictureKey(key))
    return { ok: false, code: "invalid_result", message: "the worker named an image outside images/" };
  let png: Buffer;
  try {
    const chunks: Buffer[] = [];
    for await (const chunk of await artifacts.get(key)) chunks.push(chunk as Buffer);
    png = Buffer.concat(chunks);
  } catch (e) {
    if (!isStorageError(e, "not_found")) throw e;
    if (await out.store.head(dest)) return placed;
    return {
      ok: false,
      code: "image_lost",
      message: "the generated image was removed from the artifact store before it was written; submit the record again",
    };
  }
  await out.store.put(dest, png);
  await artifacts.delete(key).catch(() => undefined);
  return placed;
}
