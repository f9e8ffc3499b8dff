// Image records of a batch job (src/batch/picture-records.ts): how a line becomes an image job's
// fields or an error line, where its PNG goes, and moving it from the artifact store exactly once
// (a resumed run finds it in place); and the benchmark's image figures (src/benchmark/measure.ts).
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  PICTURE_REFERENCE,
  pictureFormat,
  pictureOutputKey,
  pictureReference,
  placePicture,
} from "../../src/batch/picture-records.ts";
import type { Outcome } from "../../src/batch/lines.ts";
import { levelResult } from "../../src/benchmark/measure.ts";
import { pictureKey } from "../../src/pictures/keys.ts";
import { FileStore } from "../../src/storage/index.ts";

const RULE = { default_width: 64, default_height: 64, size_multiple: 8, max_side: 128 };
const format = pictureFormat(RULE);
const parse = (value: unknown, lineNumber = 3) =>
  format.parse({ lineNumber, start: 0, end: 0, text: typeof value === "string" ? value : JSON.stringify(value) });

describe("image record lines", () => {
  it("become image jobs' fields, the size checked against the pipeline's", () => {
    expect(parse({ id: "cat-1", prompt: "a cat", size: "32x16", seed: 7, num_inference_steps: 4 })).toEqual({
      ok: true,
      line: 3,
      id: "cat-1",
      work: {
        kind: "image",
        image: { prompt: "a cat", width: 32, height: 16, params: { seed: 7, num_inference_steps: 4 } },
      },
      params: {},
    });
    expect(parse({ prompt: "a cat" })).toMatchObject({
      ok: true,
      id: "line-3",
      work: { image: { width: 64, height: 64 } },
    });
  });

  it("refuse what would not make the asked-for image, naming the field", () => {
    expect(parse({ id: "a", prompt: "x", size: "30x30" })).toMatchObject({
      ok: false,
      code: "invalid_size",
      message: expect.stringMatching(/^line 3: size: .*multiples of 8/),
    });
    expect(parse({ id: "a", prompt: "x", n: 2 })).toMatchObject({
      ok: false,
      code: "invalid_record",
      message: expect.stringMatching(/one image per record/),
    });
    expect(parse({ id: "a", prompt: "x", style: "vivid" })).toMatchObject({
      ok: false,
      code: "invalid_record",
      message: expect.stringMatching(/style/),
    });
    expect(parse({ id: "a", prompt: "" })).toMatchObject({ ok: false, code: "invalid_record" });
    expect(parse("not json")).toMatchObject({ ok: false, code: "invalid_json", id: "line-3" });
  });

  it("refuse an id that would not be a plain file name", () => {
    for (const id of ["../x", "a/b", ".hidden", "", "x".repeat(129)])
      expect(parse({ id, prompt: "x" }), id).toMatchObject({ ok: false, code: "invalid_record" });
  });

  it("render their outcome as the output line", () => {
    const ok: Outcome = {
      ok: true,
      text: "",
      tokens: 6,
      image: { uri: "batch_1/cat-1.png", seed: 1, steps: 4, width: 64, height: 64 },
    };
    expect(JSON.parse(format.render({ line: 1, id: "cat-1" }, ok))).toEqual({
      id: "cat-1",
      status: "success",
      image: "batch_1/cat-1.png",
      seed: 1,
      steps: 4,
      width: 64,
      height: 64,
      tokens_used: 6,
    });
  });
});

describe("placing a record's PNG", () => {
  let dir: string;
  let artifacts: FileStore;
  let out: FileStore;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "image-records-"));
    artifacts = new FileStore(join(dir, "artifacts"));
    out = new FileStore(join(dir, "out"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("lies in the folder named as the result, beside it: one job's PNGs never meet another's", () => {
    expect(pictureOutputKey("batch_1.jsonl", "cat")).toBe("batch_1/cat.png");
    expect(pictureOutputKey("runs/result.jsonl", "cat")).toBe("runs/result/cat.png");
    expect(pictureReference("runs/result.jsonl", "cat")).toBe("result/cat.png");
    expect(PICTURE_REFERENCE.test("result/cat.png")).toBe(true);
    for (const bad of ["../cat.png", "result/../cat.png", "/etc/cat.png", "cat.png", "a/b/cat.png", "result/.png"])
      expect(PICTURE_REFERENCE.test(bad), bad).toBe(false);
  });

  it("moves it from the artifact store once; a resumed run finds it in place; a lost one fails the record", async () => {
    const key = pictureKey(Date.now(), "a".repeat(32));
    await artifacts.put(key, Buffer.from("png bytes"));
    const answered: Outcome = { ok: true, text: "", tokens: 2, image: { key, seed: 3, steps: 2, width: 8, height: 8 } };
    const placed = await placePicture(artifacts, { store: out, resultKey: "b.jsonl" }, "dog", answered);
    expect(placed).toEqual({ ...answered, image: { uri: "b/dog.png", seed: 3, steps: 2, width: 8, height: 8 } });
    expect(await readFile(join(dir, "out", "b", "dog.png"), "utf8")).toBe("png bytes");
    expect(await artifacts.head(key)).toBeNull();
    // The coordinator died after the move, before the part: the kept answer still names the artifact.
    expect(await placePicture(artifacts, { store: out, resultKey: "b.jsonl" }, "dog", answered)).toEqual(placed);
    expect(await placePicture(artifacts, { store: out, resultKey: "b.jsonl" }, "cat", answered)).toMatchObject({
      ok: false,
      code: "image_lost",
    });
    const outside = { ...answered, image: { ...answered.image, key: "models/x/v1/model.gguf" } } as Outcome;
    expect(await placePicture(artifacts, { store: out, resultKey: "b.jsonl" }, "x", outside)).toMatchObject({
      ok: false,
      code: "invalid_result",
    });
  });
});

describe("the benchmark's image figures", () => {
  it("give images/s over the level and time per image and per step per request", () => {
    const sample = (e2e: number, images: number, steps: number) => ({
      ok: true,
      itl_ms: [],
      e2e_ms: e2e,
      output_tokens: 0,
      prompt_tokens: 5,
      tokens_exact: true,
      images,
      steps,
    });
    const level = levelResult(1, [sample(1000, 1, 10), sample(2000, 2, 20)], 4);
    expect(level.images_per_s).toBe(0.75);
    expect(level.image_ms).toMatchObject({ count: 2, p50: 1000 });
    expect(level.step_ms).toMatchObject({ count: 2, p50: 100 });
    expect(
      levelResult(1, [{ ...sample(10, 0, 0), images: undefined, steps: undefined }], 1).images_per_s,
    ).toBeUndefined();
  });
});
