/**
 * Evaluation jobs' shapes (docs/evaluation.md): the request, the record kept in Redis, the results
 * stored on a version, and the per-item scores a comparison pairs.
 */
import { z } from "zod";
import { ModelName, ModelVersion, NAME_PART } from "../contracts/deployment.ts";

export const Metric = z.enum(["perplexity", "accuracy", "exact_match"]);
export type Metric = z.infer<typeof Metric>;

/** What each metric reads from a dataset line. */
export const LINE_SHAPES: Record<Metric, string> = {
  perplexity: '{"text": "..."}',
  accuracy: '{"context": "...", "choices": ["...", "..."], "answer": 0}',
  exact_match: '{"prompt": "...", "answer": "..."}',
};

/** `<model>@<version>` or `<model>@<version>:<adapter>` (the adapter's newest version on that base). */
const TARGET = new RegExp(`^(${NAME_PART})@(${NAME_PART})(?::(${NAME_PART}))?$`);

export type Target = { model: string; version: string; adapter?: string };

export function parseTarget(text: string): Target | undefined {
  const m = TARGET.exec(text);
  if (!m) return undefined;
  return { model: m[1] as string, version: m[2] as string, ...(m[3] ? { adapter: m[3] } : {}) };
}

export const CreateEvaluationRequest = z.object({
  /** `<model>@<version>[:<adapter>]`. */
  model: z.string().refine((s) => parseTarget(s) !== undefined, {
    message: 'expected "<model>@<version>" or "<model>@<version>:<adapter>", e.g. "tiny@v1"',
  }),
  /** A storage URI (confined as batch inputs are) or an uploaded file's id (`file-…`). */
  dataset: z.string().min(1).max(2048),
  /** Absent: read from the dataset's first line (text → perplexity, choices → accuracy, prompt → exact_match). */
  metric: Metric.optional(),
  /** exact_match: the most tokens generated per answer (lm-eval's max_gen_toks default 256). */
  max_tokens: z.number().int().min(1).max(4096).optional(),
  /** Model jobs in flight at once. */
  concurrency: z.number().int().min(1).max(64).optional(),
});
export type CreateEvaluationRequest = z.infer<typeof CreateEvaluationRequest>;

export const EvaluationState = z.enum(["queued", "running", "succeeded", "failed", "cancelled"]);
export type EvaluationState = z.infer<typeof EvaluationState>;

export const EvaluationResult = z.object({
  metric: Metric,
  value: z.number(),
  n: z.number().int().nonnegative(),
  stderr: z.number().nullable(),
  /** perplexity: tokens scored; accuracy: choices whose tokens joined the context's last token (docs/evaluation.md). */
  tokens: z.number().int().nonnegative().optional(),
  boundary_merges: z.number().int().nonnegative().optional(),
});
export type EvaluationResult = z.infer<typeof EvaluationResult>;

export const EvaluationRecord = z.object({
  id: z.string(),
  object: z.literal("evaluation"),
  /** As requested: `<model>@<version>[:<adapter>]`. */
  model: z.string(),
  base: z.object({ name: ModelName, version: ModelVersion }),
  /** `<adapter name>@<adapter version>` when an adapter is evaluated. */
  adapter: z.string().nullable(),
  metric: Metric,
  dataset: z.string(),
  dataset_sha256: z.string(),
  items: z.number().int().nonnegative(),
  max_tokens: z.number().int().positive(),
  concurrency: z.number().int().positive(),
  /** The model queue the items go to (the endpoint serving the version). */
  queue: z.string(),
  state: EvaluationState,
  done: z.number().int().nonnegative(),
  result: EvaluationResult.nullable(),
  error: z.object({ code: z.string(), message: z.string() }).nullable(),
  created_by: z.string().nullable(),
  org: z.string(),
  /** Where the dataset is read from (a confined URI or an uploaded file's object), and how it was confined. */
  source: z.object({
    uri: z.string(),
    identity: z.string().optional(),
    scope: z.object({ key_id: z.string(), role: z.enum(["admin", "user"]), org: z.string() }).optional(),
  }),
  cancel_requested: z.boolean().optional(),
  created: z.number().int(),
  started: z.number().int().nullable(),
  finished: z.number().int().nullable(),
});
export type EvaluationRecord = z.infer<typeof EvaluationRecord>;

/** The latest result of a metric on a version (or adapter), as stored there. */
export const StoredResult = EvaluationResult.extend({
  dataset: z.string(),
  dataset_sha256: z.string(),
  job_id: z.string(),
  org: z.string(),
  /** `<model>@<version>[:<adapter>]` as evaluated. */
  model: z.string(),
  adapter: z.string().nullable(),
  finished: z.number().int(),
});
export type StoredResult = z.infer<typeof StoredResult>;

/** One item's score: perplexity [nll, tokens]; accuracy and exact_match 0 or 1 (with the choices' log-likelihoods). */
export const ItemScore = z.object({
  x: z.number(),
  tokens: z.number().int().nonnegative().optional(),
  lls: z.array(z.number()).optional(),
  merged: z.number().int().nonnegative().optional(),
});
export type ItemScore = z.infer<typeof ItemScore>;

/** What a client sees of a record (not the resolved storage location). */
export function publicRecord(r: EvaluationRecord): Omit<EvaluationRecord, "source" | "queue" | "cancel_requested"> {
  const { source: _s, queue: _q, cancel_requested: _c, ...shown } = r;
  return shown;
}
