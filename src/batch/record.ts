/**
 * Batch inference: the job record the API returns, the create request, and the
 * JSONL shapes read from and written to object storage (see docs/batch.md).
 */
import { z } from "zod";
import { ModelVersion, NAME_PATTERN } from "../contracts/deployment.ts";
import { SamplingParams } from "../contracts/job.ts";

/** A batch job's `model`: a registered model's name, or `<endpoint>:<adapter>` (src/batch/adapter-target.ts). */
export function isBatchModel(model: string): boolean {
  const parts = model.split(":");
  return parts.length <= 2 && parts.every((p) => NAME_PATTERN.test(p));
}

/**
 * `cancelling` is reported while a cancel request waits for the coordinator
 * to stop; `completed`, `failed` and `cancelled` are final.
 */
export const BatchState = z.enum(["queued", "running", "cancelling", "completed", "failed", "cancelled"]);
export type BatchState = z.infer<typeof BatchState>;

export const FINAL_BATCH_STATES: readonly BatchState[] = ["completed", "failed", "cancelled"];

export const MAX_BATCH_SIZE = 10_000;
export const MAX_BATCH_CONCURRENCY = 256;

/** Sampling settings a job applies to every record (a line may override them). */
export const BatchSampling = SamplingParams.pick({ temperature: true, top_p: true, seed: true });
export type BatchSampling = z.infer<typeof BatchSampling>;

/**
 * How a job created without `output` names where its result is: a prefix in
 * the server's artifact store that no client can name, served to the job's
 * key (or an admin) by GET /v1/batch-jobs/<id>/output.
 */
export const KEPT_OUTPUT = "batch-outputs/";

export const CreateBatchRequest = z
  .object({
    /** A registered model's name, or `<endpoint>:<adapter>`: the endpoint's version with a LoRA adapter (docs/adapters.md). */
    model: z
      .string()
      .refine(
        isBatchModel,
        'expected a model name, or "<endpoint>:<adapter>" (each letters, digits, ".", "_" or "-", 1-63 characters, starting with a letter or digit)',
      ),
    /** With `<endpoint>:<adapter>`: "latest" (the default) or the endpoint's own version. */
    version: ModelVersion.default("latest"),
    /**
     * The JSONL object to read: an absolute path, file:// URL or s3://bucket/key
     * inside the storage this key may use (GET /v1/storage), or a name relative
     * to the key's own area. Exactly one of `input` and `input_file_id`.
     */
    input: z.string().min(1).optional(),
    /** A file uploaded with POST /v1/files (purpose=batch) by the same key, instead of `input`. */
    input_file_id: z.string().min(1).optional(),
    /**
     * Where results go: a prefix (directory, or s3://bucket/prefix/) receives
     * `<job id>.jsonl`; a URI ending in `.jsonl` names the output object itself.
     * May be left out with `input_file_id`: the server keeps the result
     * (KEPT_OUTPUT), for GET /v1/batch-jobs/<id>/output.
     */
    output: z.string().min(1).optional(),
    /** Replace an existing output object; without it an existing one is refused (409 output_exists). */
    overwrite: z.boolean().default(false),
    /** Records of this job in flight at once. */
    concurrency: z.number().int().min(1).max(MAX_BATCH_CONCURRENCY).default(8),
    /** Records per checkpoint: each batch's results are written as one part before the job moves on. */
    batch_size: z.number().int().min(1).max(MAX_BATCH_SIZE).default(100),
    ...BatchSampling.shape,
  })
  .strict()
  .refine((r) => (r.input === undefined) !== (r.input_file_id === undefined), {
    message: "give exactly one of input (a storage URI or relative name) and input_file_id (an uploaded file)",
    path: ["input"],
  })
  // Without storage roots (a cluster's default) no client-named output is allowed: an uploaded input's result is kept by the server.
  .refine((r) => r.output !== undefined || r.input_file_id !== undefined, {
    message:
      "required with input; leave it out only with input_file_id, and the server keeps the result (GET /v1/batch-jobs/<id>/output)",
    path: ["output"],
  });
export type CreateBatchRequest = z.infer<typeof CreateBatchRequest>;
export type CreateBatchRequestInput = z.input<typeof CreateBatchRequest>;

export const BatchCounts = z.object({
  /** Records (non-blank lines) in the input; 0 until the input has been counted. */
  total: z.number().int().nonnegative(),
  succeeded: z.number().int().nonnegative(),
  failed: z.number().int().nonnegative(),
  /** Records sent to the model and not answered yet. */
  in_flight: z.number().int().nonnegative(),
});
export type BatchCounts = z.infer<typeof BatchCounts>;

export const BatchJobError = z.object({ code: z.string(), message: z.string() });
export type BatchJobError = z.infer<typeof BatchJobError>;

export const BatchThroughput = z.object({
  records_per_second: z.number().nonnegative(),
  tokens_per_second: z.number().nonnegative(),
});
export type BatchThroughput = z.infer<typeof BatchThroughput>;

export const BatchJob = z.object({
  object: z.literal("batch_job"),
  id: z.string(),
  model: z.string(),
  /** A LoRA adapter every record applies (`<name>@<version>`), when the job named `<endpoint>:<adapter>`. */
  adapter: z.string().optional(),
  /** As requested ("latest" or a version). */
  version: z.string(),
  /** The concrete version the records are sent to; null until the job has started. */
  resolved_version: z.string().nullable(),
  input: z.string(),
  output: z.string(),
  /** The assembled output object, once the job has completed (or was cancelled with some results). */
  output_file: z.string().nullable(),
  concurrency: z.number().int(),
  batch_size: z.number().int(),
  sampling: BatchSampling,
  state: BatchState,
  counts: BatchCounts,
  /** Over the last few seconds of a running job; null otherwise. */
  throughput: BatchThroughput.nullable(),
  /** Why the job failed (or null). */
  error: BatchJobError.nullable(),
  /** An existing output object may be replaced. */
  overwrite: z.boolean(),
  /**
   * Records already written when a job ended without completing (kept in the
   * parts under `parts_uri`, readable with GET /v1/batch-jobs/<id>/output); null otherwise.
   */
  partial: z.object({ records: z.number().int().nonnegative(), parts_uri: z.string() }).nullable(),
  /** A failed job that POST /v1/batch-jobs/<id>/resume can continue from its checkpoint. */
  resumable: z.boolean(),
  /** The creator's id (an API key's, or a signed-in user's); users see only their own jobs. */
  created_by: z.string().nullable(),
  /** The creator's organization: its admins see the job, other organizations never do. */
  org: z.string(),
  /** Epoch milliseconds. */
  created: z.number().int(),
  started: z.number().int().nullable(),
  finished: z.number().int().nullable(),
});
export type BatchJob = z.infer<typeof BatchJob>;

export const BatchJobList = z.object({
  object: z.literal("list"),
  data: z.array(BatchJob),
  has_more: z.boolean(),
});
export type BatchJobList = z.infer<typeof BatchJobList>;

/**
 * One input line. Unknown fields are ignored, so lines written for other
 * tools (extra metadata) still work; the sampling fields override the job's.
 */
export const BatchInputLine = z.object({
  id: z.string().min(1).max(512),
  prompt: z.string(),
  max_tokens: z.number().int().positive(),
  temperature: SamplingParams.shape.temperature,
  top_p: SamplingParams.shape.top_p,
  seed: SamplingParams.shape.seed,
  stop: SamplingParams.shape.stop,
});
export type BatchInputLine = z.infer<typeof BatchInputLine>;

export const BatchOutputSuccess = z.object({
  id: z.string(),
  output: z.string(),
  /** Prompt plus completion tokens, as the engine counted them. */
  tokens_used: z.number().int().nonnegative(),
  status: z.literal("success"),
});

/**
 * A record that could not be processed. Lines without a usable id (not JSON,
 * not an object, or `id` missing or not a non-empty string) get
 * `"line-<n>"`, n being the 1-based line number in the input.
 */
export const BatchOutputError = z.object({
  id: z.string(),
  status: z.literal("error"),
  error: BatchJobError,
});

export const BatchOutputLine = z.discriminatedUnion("status", [BatchOutputSuccess, BatchOutputError]);
export type BatchOutputLine = z.infer<typeof BatchOutputLine>;

/** The id an output line carries when its input line had no usable id. */
export function lineId(lineNumber: number): string {
  return `line-${lineNumber}`;
}

/**
 * Where the job resumes: everything before `next_byte` (line `next_line`) has
 * been written as parts 0..parts-1, with these counts.
 */
export const BatchCheckpoint = z.object({
  next_line: z.number().int().positive(),
  next_byte: z.number().int().nonnegative(),
  parts: z.number().int().nonnegative(),
  succeeded: z.number().int().nonnegative(),
  failed: z.number().int().nonnegative(),
  /** Size of the input when the job started: a resumed job refuses an input that changed. */
  input_size: z.number().int().nonnegative(),
  /** The result object is written; what remains is removing the parts. */
  assembled: z.boolean().optional(),
  /** Placing the result has begun (a run that finds it in place and the right size knows it as its own). */
  assembling: z.boolean().optional(),
});
export type BatchCheckpoint = z.infer<typeof BatchCheckpoint>;
