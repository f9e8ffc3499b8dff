/**
 * `npm run bench:images`: image generation through the platform against the same pipeline called
 * directly, as a ratio measured in one run (docs/images.md, "Benchmark"). The direct side is the
 * diffusers engine's own Python child (workers/engines/diffusers/server.py) driven from this process,
 * with nothing between; the platform side is `platform up` with the same pipeline directory:
 * POST /v1/images/generations → gateway → queue → worker → the same child. Concurrency 1, the same
 * prompt, size, steps and seeds on both, image by image in turn so a busy neighbour on a shared
 * machine slows both sides alike. Target: the platform at ≥ 0.95 of direct throughput on CPU.
 *
 *   npm run bench:images [-- --images 24 --rounds 4 --steps 8 --size 64x64 --pipeline <dir>]
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { loadDiffusers } from "../workers/engines/diffusers.ts";
import { makeTinyPipeline, referencePython } from "../test/helpers/models.ts";
import { startStack } from "../test/helpers/stack.ts";
import { postJson } from "./measure.ts";

const { values } = parseArgs({
  options: {
    images: { type: "string", default: "24" },
    rounds: { type: "string", default: "4" },
    steps: { type: "string", default: "8" },
    size: { type: "string", default: "64x64" },
    pipeline: { type: "string" },
  },
});
const IMAGES = Number(values.images);
const ROUNDS = Number(values.rounds);
const STEPS = Number(values.steps);
const [WIDTH, HEIGHT] = (values.size as string).split("x").map(Number) as [number, number];
const PROMPT = "a watercolor painting of a lighthouse on a cliff at dusk";
const TARGET = 0.95;

const python = referencePython();
if (!python) {
  console.error("bench:images needs a Python with torch and diffusers (.venv-ref: `npm run setup:python`)");
  process.exit(2);
}
const scratch = await mkdtemp(join(tmpdir(), "bench-images-"));
const pipeline = values.pipeline ?? join(scratch, "tiny-sd");
if (!values.pipeline) {
  makeTinyPipeline(python, pipeline);
}

const direct = await loadDiffusers({ modelPath: pipeline, python, parallel: 1, gpu: false });
const stack = await startStack({ model: pipeline, args: ["--name", "pic"], env: { PLATFORM_IMAGES_PYTHON: python } });
const url = `${stack.baseUrl}/v1/images/generations`;
const headers = { authorization: `Bearer ${stack.apiKey}` };

const viaDirect = async (seed: number) => {
  const signal = new AbortController().signal;
  const out = await direct.generateImage(
    { prompt: PROMPT, width: WIDTH, height: HEIGHT, steps: STEPS, guidance: 7.5, seed },
    { signal, onStep: () => undefined },
  );
  return out.png.length;
};
const viaPlatform = async (seed: number) => {
  const body = { model: "pic", prompt: PROMPT, size: `${WIDTH}x${HEIGHT}`, num_inference_steps: STEPS, seed };
  const r = await postJson<{ data: { b64_json: string }[] }>(url, body, headers);
  return Buffer.from(r.data[0]?.b64_json ?? "", "base64").length;
};

/** One image through `send`: its wall time in seconds. */
async function timed(send: (seed: number) => Promise<number>, seed: number): Promise<number> {
  const t0 = performance.now();
  await send(seed);
  return (performance.now() - t0) / 1000;
}

try {
  // Warm both: the first call of a pipeline pays for its lazy set-up.
  for (const seed of [0, 1]) {
    await timed(viaDirect, seed);
    await timed(viaPlatform, seed);
  }
  const per = Math.max(1, Math.round(IMAGES / ROUNDS));
  let directS = 0;
  let platformS = 0;
  for (let r = 0; r < ROUNDS; r++) {
    // Image by image, each side in turn, the first alternating: a neighbour's burst (or the host's
    // steal on a VM) falls on both sides alike rather than on one side's block of images.
    let d = 0;
    let p = 0;
    for (let i = 0; i < per; i++) {
      const seed = 100 + r * per + i;
      if ((r + i) % 2 === 0) {
        d += await timed(viaDirect, seed);
        p += await timed(viaPlatform, seed);
      } else {
        p += await timed(viaPlatform, seed);
        d += await timed(viaDirect, seed);
      }
    }
    directS += d;
    platformS += p;
    console.log(
      `  round ${r + 1}: direct ${((d / per) * 1000).toFixed(0)} ms/image, platform ${((p / per) * 1000).toFixed(0)} ms/image, ratio ${(d / p).toFixed(3)}`,
    );
  }
  const n = per * ROUNDS;
  const directRate = n / directS;
  const platformRate = n / platformS;
  const ratio = platformRate / directRate;
  console.log(
    `bench:images: ${n} images per side, ${WIDTH}x${HEIGHT}, ${STEPS} steps, concurrency 1, interleaved image by image in ${ROUNDS} rounds`,
  );
  console.log(
    `  direct (diffusers child, no platform)  ${directRate.toFixed(3)} images/s  ${((directS / n) * 1000).toFixed(0)} ms/image  ${((directS / n / STEPS) * 1000).toFixed(1)} ms/step`,
  );
  console.log(
    `  platform (/v1/images/generations)      ${platformRate.toFixed(3)} images/s  ${((platformS / n) * 1000).toFixed(0)} ms/image  ${((platformS / n / STEPS) * 1000).toFixed(1)} ms/step`,
  );
  console.log(
    `  ratio platform/direct                  ${ratio.toFixed(3)} (target >= ${TARGET}: ${ratio >= TARGET ? "met" : "NOT met"})`,
  );
} finally {
  await direct.dispose();
  await stack.stop();
  await rm(scratch, { recursive: true, force: true });
}
