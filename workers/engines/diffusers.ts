/**
 * Hugging Face diffusers: workers/engines/diffusers/server.py runs the pipeline in a Python child on
 * a free port of 127.0.0.1, supervised like `vllm serve` (vllm-process.ts: the pipe watchdog, its own
 * process group, ended with the worker however it ends). This engine posts one image per request and
 * reads the child's NDJSON answer: a line per denoising step, then the PNG. docs/engines.md ("diffusers").
 */
import { randomBytes } from "node:crypto";
import { spawnWatched } from "../../src/process/watchdog.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import type { EmbeddingItem, Usage } from "../../src/contracts/job.ts";
import { freePort } from "../../src/process/free-port.ts";
import { withoutWorkerAllocator } from "../../src/process/worker-env.ts";
import type { Engine, ImageHooks, ImageOutput, ImageRequest, TextOutput } from "./engine.ts";
import { VllmProcess } from "./vllm-process.ts";

/** What the engine uses where a job leaves a field out (diffusers' own defaults for Stable Diffusion). */
export const DIFFUSERS_DEFAULTS = { steps: 50, guidance: 7.5 } as const;

export type DiffusersOptions = {
  /** The pipeline directory (model_index.json and its component folders). */
  modelPath: string;
  /** The interpreter with torch and diffusers (settings.pictures.python). */
  python: string;
  /** Images one replica holds at once. */
  parallel: number;
  /** resources.gpu > 0: CUDA where torch has it, else the CPU. */
  gpu: boolean;
  /** runtime.dtype; "auto" or absent: float16 on a GPU, float32 on the CPU. */
  dtype?: string;
  /** torch's threads (resources.cpu). */
  threads?: number;
  /** Same-shaped images per pipeline call (settings.pictures.maxBatch). */
  maxBatch?: number;
  startTimeoutMs?: number;
  log?: (line: string) => void;
  env?: Record<string, string | undefined>;
};

/** What the child says of its pipeline (GET /info). */
export type PipelineInfo = {
  pipeline: string;
  default_size: number | null;
  scheduler: string;
  device: string;
  dtype: string;
  max_batch: number;
};

const SERVER = new URL("./diffusers/server.py", import.meta.url).pathname;
const STOP_GRACE_MS = 10_000;

export async function loadDiffusers(options: DiffusersOptions): Promise<DiffusersEngine> {
  const port = await freePort();
  const args = [
    SERVER,
    "--model",
    options.modelPath,
    "--port",
    String(port),
    "--device",
    options.gpu ? "auto" : "cpu",
    "--dtype",
    options.dtype ?? "auto",
    "--max-batch",
    String(options.maxBatch ?? 1),
    "--threads",
    String(options.threads ?? 0),
  ];
  const log = options.log ?? ((line: string) => process.stderr.write(`[diffusers] ${line}\n`));
  const token = randomBytes(24).toString("base64url");
  const child = new VllmProcess(
    options.python,
    args,
    {
      PYTHONUNBUFFERED: "1",
      HF_HUB_OFFLINE: "1",
      // Only this worker knows it: the child refuses every other loopback client (docs/security.md).
      DIFFUSERS_TOKEN: token,
      ...withoutWorkerAllocator(process.env),
      ...(options.gpu ? {} : { CUDA_VISIBLE_DEVICES: "" }),
      ...options.env,
    },
    log,
    {
      engine: "the diffusers engine",
      install:
        "Install torch and diffusers for it (`npm run setup:python` in a checkout) or set PLATFORM_IMAGES_PYTHON to a Python that has them.",
      timeoutSetting: "PLATFORM_IMAGES_START_TIMEOUT_MS",
    },
  );
  const baseUrl = `http://127.0.0.1:${port}`;
  try {
    await child.waitHealthy(baseUrl, options.startTimeoutMs ?? 10 * 60_000);
    const auth = { authorization: `Bearer ${token}` };
    const info = (await (await fetch(`${baseUrl}/info`, { headers: auth })).json()) as PipelineInfo;
    if (options.gpu && info.device !== "cuda")
      log(`resources.gpu asks for a GPU, but torch sees no CUDA here: on the CPU`);
    return new DiffusersEngine(child, baseUrl, options.parallel, info, auth);
  } catch (e) {
    await child.stop(STOP_GRACE_MS);
    throw e;
  }
}

type ChildEvent =
  | { type: "step"; step: number; steps: number }
  | { type: "done"; png: string; prompt_tokens: number; batch: number }
  | { type: "cancelled" }
  | { type: "error"; message: string };

export class DiffusersEngine implements Engine {
  readonly name = "diffusers";
  readonly parallel: number;
  readonly info: PipelineInfo;
  readonly lost: Promise<string>;
  private readonly child: VllmProcess;
  private readonly baseUrl: string;
  /** The worker's secret, which the child asks of every call. */
  private readonly auth: Record<string, string>;
  private disposed = false;
  private next = 0;

  constructor(child: VllmProcess, baseUrl: string, parallel: number, info: PipelineInfo, auth: Record<string, string>) {
    this.auth = auth;
    this.child = child;
    this.baseUrl = baseUrl;
    this.parallel = parallel;
    this.info = info;
    this.lost = child.exited.then(() => child.describeExit());
    // Nobody may be listening when it dies; the worker's engine-lost watch reads it.
    this.lost.catch(() => undefined);
  }

  /** Readiness: one tiny image (the smallest size the pipeline takes, one step). */
  async warmup(): Promise<void> {
    const side = Math.max(8, Math.round((this.info.default_size ?? 64) / 8));
    const size = side - (side % 8) || 8;
    await this.generateImage({ prompt: "warm-up", width: size, height: size, steps: 1, guidance: 1, seed: 0 }, {});
  }

  async generate(): Promise<TextOutput> {
    throw new PlatformError(
      400,
      "model_not_generative",
      "this model makes images: use /v1/images/generations with it",
      "model",
    );
  }

  async embed(_inputs: EmbeddingItem[]): Promise<{ embeddings: number[][]; usage: Usage }> {
    throw new PlatformError(
      400,
      "model_not_embedding",
      "this model makes images: use /v1/images/generations with it",
      "model",
    );
  }

  async generateImage(request: ImageRequest, hooks: ImageHooks): Promise<ImageOutput> {
    const id = `i${this.next++}`;
    const steps = request.steps ?? DIFFUSERS_DEFAULTS.steps;
    const body = {
      id,
      prompt: request.prompt,
      negative_prompt: request.negative_prompt ?? null,
      width: request.width,
      height: request.height,
      steps,
      guidance: request.guidance ?? DIFFUSERS_DEFAULTS.guidance,
      seed: request.seed,
    };
    const cancel = () => {
      void fetch(`${this.baseUrl}/cancel`, { method: "POST", headers: this.auth, body: JSON.stringify({ id }) }).catch(
        () => undefined,
      );
    };
    if (hooks.signal?.aborted) throw cancelled();
    hooks.signal?.addEventListener("abort", cancel, { once: true });
    try {
      const res = await fetch(`${this.baseUrl}/generate`, {
        method: "POST",
        headers: this.auth,
        body: JSON.stringify(body),
      }).catch((e: unknown) => {
        throw new PlatformError(502, "engine_error", `${this.child.describeExit()} (${(e as Error).message})`);
      });
      if (res.status !== 200 || !res.body)
        throw new PlatformError(500, "engine_error", `the diffusers engine refused the image: ${await res.text()}`);
      for await (const event of ndjson(res.body)) {
        if (event.type === "step") hooks.onStep?.(event.step, event.steps);
        else if (event.type === "done")
          return {
            png: Buffer.from(event.png, "base64"),
            steps,
            promptTokens: event.prompt_tokens,
            batch: event.batch,
          };
        else if (event.type === "cancelled") throw cancelled();
        else throw new PlatformError(500, "engine_error", `the pipeline failed: ${event.message}`);
      }
      throw new PlatformError(502, "engine_error", this.child.describeExit());
    } finally {
      hooks.signal?.removeEventListener("abort", cancel);
    }
  }

  /** The child's queue now: requests waiting for a pipeline call, and images in the current one. */
  async queue(): Promise<{ waiting: number; running: number }> {
    const res = await fetch(`${this.baseUrl}/queue`, { headers: this.auth }).catch((e: unknown) => {
      throw new PlatformError(502, "engine_error", `${this.child.describeExit()} (${(e as Error).message})`);
    });
    return (await res.json()) as { waiting: number; running: number };
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    await this.child.stop(STOP_GRACE_MS);
  }
}

function cancelled(): PlatformError {
  return new PlatformError(499, "cancelled", "the request was cancelled by its client");
}

/** The child's answer, one JSON object per line. */
async function* ndjson(body: ReadableStream<Uint8Array>): AsyncGenerator<ChildEvent> {
  const decoder = new TextDecoder();
  let buffered = "";
  for await (const chunk of body) {
    buffered += decoder.decode(chunk, { stream: true });
    for (let nl = buffered.indexOf("\n"); nl >= 0; nl = buffered.indexOf("\n")) {
      const line = buffered.slice(0, nl).trim();
      buffered = buffered.slice(nl + 1);
      if (line !== "") yield JSON.parse(line) as ChildEvent;
    }
  }
}

/**
 * Whether `python` can run the engine: a line for `platform up` ("torch 2.x and diffusers 0.y, on
 * CUDA") or why not. Importing torch and diffusers takes seconds, so callers do not wait on it to start.
 */
export async function picturesSupport(python: string): Promise<{ ok: boolean; line: string }> {
  const probe =
    "import torch, diffusers, transformers; print(torch.__version__, diffusers.__version__, 'CUDA' if torch.cuda.is_available() else 'CPU')";
  // Under the watchdog: the probe takes seconds, and must not outlive an `up` stopped (or killed) meanwhile.
  const watched = spawnWatched(python, ["-c", probe], { output: "pipe" });
  let stdout = "";
  watched.process.stdout?.on("data", (chunk: Buffer) => {
    if (stdout.length < 4096) stdout += chunk.toString("utf8");
  });
  const timer = setTimeout(() => watched.stop(), 180_000);
  timer.unref();
  const code = await new Promise<number | null>((resolve) => {
    watched.process.on("close", (c) => resolve(c));
    watched.process.on("error", () => resolve(null));
  });
  clearTimeout(timer);
  const [torch, diffusers, device] = stdout.trim().split(/\s+/);
  if (code !== 0 || !device)
    return {
      ok: false,
      line: `not available: ${python} cannot import torch and diffusers (\`npm run setup:python\`, or set PLATFORM_IMAGES_PYTHON)`,
    };
  return { ok: true, line: `torch ${torch}, diffusers ${diffusers} (${python}), on ${device}` };
}
