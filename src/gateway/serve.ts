/**
 * Serving one request through the fabric, whatever it asks for (chat, completion, generate or
 * embeddings): the key's rate limits, the endpoint's admission control, one job per prompt and choice,
 * cancelled when the client goes away, and once the request is answered its metrics, A/B
 * outcome and usage. What the client receives is the caller's to make (serve-text.ts for text,
 * the embeddings route in openai.ts).
 */
import type { Context } from "hono";
import type { VariantOutcome } from "../abtests/store.ts";
import { endpointQueueName } from "../contracts/engines.ts";
import { PlatformError, publicJobError } from "../contracts/errors.ts";
import type { JobError, JobEvent, Usage } from "../contracts/job.ts";
import type { Endpoint } from "../endpoints/record.ts";
import type { AdmissionLimits } from "../queue/admission.ts";
import type { JobHandle, Submission, SubmitOptions } from "../queue/dispatcher.ts";
import { chooseReplica, prefixOf } from "../queue/lanes.ts";
import { DEFAULT_COMPLETION_RESERVATION, type Reservation, reservationOf } from "../ratelimit/reservation.ts";
import { meterOf } from "./ratelimit.ts";
import type { Answered, Served } from "../telemetry/request-metrics.ts";
import { onClientGone } from "./client-gone.ts";
import type { Caller } from "./env.ts";
import type { GatewayMetrics } from "./metrics.ts";
import type { Target } from "./routing.ts";

export type ServeContext = {
  /** `queue`: the endpoint's (engines.ts `endpointQueueName`); `cost`: the job's estimated tokens, for its fair share. */
  submit: (
    submission: Submission,
    options: Pick<SubmitOptions, "queueWaitMs" | "queue" | "cost" | "lane" | "idle">,
  ) => Promise<JobHandle>;
  metrics: GatewayMetrics;
  /** Admission control (src/queue/admission.ts): throws the 429/503 to answer instead of queueing. */
  admit?: (endpoint: Endpoint) => Promise<AdmissionLimits>;
  /** Each request's outcome, for the A/B test's per-variant numbers (counted only when `target.abtest`). */
  onOutcome?: (target: Target, outcome: VariantOutcome) => void;
};

/** A request whose jobs have begun: each has produced a token or its result. */
export type Serving = {
  /** Each choice's first token or result, in choice order (prompt by prompt, `n` choices each). */
  firsts: JobEvent[];
  /** Each choice's events after its first. */
  events: AsyncGenerator<JobEvent>[];
  /** As the route recorded it for errors, which the gateway's error handler counts (openai.ts). */
  served: Served;
  /** Seconds since serving began. */
  elapsed(): number;
  cancel(): Promise<void>;
  /** The request got its answer: its metrics, its A/B outcome, the key's usage. */
  answered(a: Answered): void;
  /** It failed after its response began, where the gateway's error handler never sees it. */
  failed(err: PlatformError): void;
};

/**
 * Admits and enqueues each of `submissions` (one per prompt: a completions request may have
 * several, any other request has one) as `n` jobs, one per choice, and waits for each to begin.
 * Choice `p * n + i` is prompt p's i-th, as OpenAI and vLLM number them. A refusal before any job
 * begins (rate limit, admission, a replica's error) is thrown, to be answered as an ordinary HTTP
 * error. `paths`: where the request names each prompt (`prompt`, or `prompt[1]` in a list of them).
 */
export async function serve(
  c: Context,
  ctx: ServeContext,
  submissions: Submission[],
  options: { target: Target; n?: number; paths?: string[] },
): Promise<Serving> {
  const startedAt = performance.now();
  const { target } = options;
  const submission = submissions[0] as Submission;
  // Which version answered, whichever way it was chosen (default, A/B variant, or pinned).
  c.header("x-model-version", submission.version);
  const outcome = (ok: boolean, usage?: Usage) => {
    if (target.abtest)
      ctx.onOutcome?.(target, {
        ok,
        latencyMs: performance.now() - startedAt,
        promptTokens: usage?.prompt_tokens,
        completionTokens: usage?.completion_tokens,
      });
  };
  // An adapter's requests are counted under `<endpoint>:<adapter>`, in metrics and usage alike.
  const served: Served = { model_name: target.label, version: submission.version };
  // The key's rate limits (src/ratelimit/meter.ts), for the version routing chose, before the queue's own admission.
  const n = options.n ?? 1;
  const meter = meterOf(c);
  await meter?.admit(
    { model: target.name, version: target.version, usageModel: target.label },
    forChoices(submissions, n),
  );
  const limits = ctx.admit ? await ctx.admit(target.endpoint) : undefined;
  const queue = endpointQueueName(target.endpoint);
  // Its fair share is its organization's, then its key's (src/queue/fair-share.ts).
  const caller = c.get("caller") as Caller | undefined;
  const tenant = caller && { org: caller.org, key: caller.id };
  // A request that names no priority is in its key's default band.
  const keyPriority = caller?.limits?.priority;
  const placed = (s: Submission): Submission => ({
    ...s,
    ...(tenant && { tenant }),
    ...(s.priority === undefined && keyPriority !== undefined && { priority: keyPriority }),
  });
  const handles = await submitChoices(ctx, submissions.map(placed), n, {
    queueWaitMs: limits?.maxQueueWaitMs,
    queue,
    lanes: limits?.lanes,
    // One job alone may skip the fair-share tag; a request of several jobs is placed job by job.
    idle: limits?.idle === true && submissions.length * n === 1,
  });
  const cancel = async () => {
    await Promise.all(handles.map((h) => h.cancel()));
  };
  // A client that goes away cancels its jobs on the workers.
  onClientGone(c, () => void cancel());

  const refuse = async (e: unknown) => {
    await cancel();
    // A replica that held the request without a free sequence past its max queue wait.
    if (e instanceof PlatformError && e.code === "queue_timeout")
      ctx.metrics.rateLimited.inc({ ...served, reason: e.code });
    outcome(false);
    return e;
  };
  let firsts: JobEvent[];
  try {
    firsts = await Promise.all(handles.map((h) => nextMeaningful(h.events)));
  } catch (e) {
    throw await refuse(e);
  }
  const refusedAt = firsts.findIndex((f) => f.type === "error");
  const refused = firsts[refusedAt];
  if (refused?.type === "error")
    throw await refuse(publicJobError(promptNamed(refused.error, options.paths?.[Math.floor(refusedAt / n)])));

  return {
    firsts,
    events: handles.map((h) => h.events),
    served,
    elapsed: () => (performance.now() - startedAt) / 1000,
    cancel,
    answered(a) {
      ctx.metrics.answered(served, "online", submission.kind, a);
      outcome(true, a.usage);
      meter?.complete(a.usage);
    },
    failed(err) {
      ctx.metrics.failed(served, "online", submission.kind, err);
      outcome(false);
      meter?.fail();
    },
  };
}

/**
 * One job per prompt and choice, in choice order; with a seed, a prompt's choice i samples with
 * seed + i so the choices differ and each is reproducible.
 */
async function submitChoices(
  ctx: ServeContext,
  submissions: Submission[],
  n: number,
  { lanes, ...options }: { queueWaitMs?: number; queue: string; lanes?: AdmissionLimits["lanes"]; idle: boolean },
): Promise<JobHandle[]> {
  const seeded = (submission: Submission, i: number): Submission => {
    if (i === 0 || !("params" in submission) || submission.params?.seed === undefined) return submission;
    return { ...submission, params: { ...submission.params, seed: submission.params.seed + i } };
  };
  const jobs = submissions.flatMap((submission) => Array.from({ length: n }, (_, i) => seeded(submission, i)));
  const settled = await Promise.allSettled(
    jobs.map((job) =>
      ctx.submit(job, { ...options, cost: job.tenant && estimatedTokens(job), lane: lanes && laneOf(job, lanes) }),
    ),
  );
  const handles = settled.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
  const failure = settled.find((s) => s.status === "rejected");
  if (failure) {
    await Promise.all(handles.map((h) => h.cancel()));
    throw failure.reason;
  }
  return handles;
}

/** The lane of the replica the job's prompt prefix hashes to (src/queue/lanes.ts); that replica's load counts it. */
function laneOf(job: Submission, lanes: NonNullable<AdmissionLimits["lanes"]>): SubmitOptions["lane"] {
  const prefix = prefixOf(job);
  const replica = prefix === undefined ? undefined : chooseReplica(prefix, lanes.replicas);
  if (!replica) return undefined;
  replica.load += 1;
  return { name: replica.lane, maxDepth: replica.parallel, waitMs: lanes.waitMs };
}

/** What a job may cost in tokens before it runs: its prompt, estimated, and all it may generate. */
function estimatedTokens(job: Submission): number {
  const r = reservationOf(job);
  return r.promptTokens + (r.maxTokens ?? DEFAULT_COMPLETION_RESERVATION);
}

/**
 * Each prompt is read once whatever the number of choices; every choice may generate up to
 * max_tokens. A request counts as one toward rpm whatever its choices, but each image is a request.
 */
function forChoices(submissions: Submission[], n: number): Reservation {
  const each = submissions.map(reservationOf);
  const promptTokens = each.reduce((sum, r) => sum + r.promptTokens, 0);
  const maxTokens = each[0]?.maxTokens;
  const requests = submissions.some((s) => s.kind === "image") ? n * submissions.length : 1;
  return { promptTokens, maxTokens: maxTokens === undefined ? undefined : maxTokens * n * each.length, requests };
}

/**
 * A replica names a job's prompt `prompt` (`prompt[3]: token 70000 is not in ...`); in a request
 * of several prompts, that job's prompt is the one at `path` (`prompt[1][3]: ...`).
 */
function promptNamed(error: JobError, path: string | undefined): JobError {
  return path !== undefined && error.param === "prompt" && error.message.startsWith("prompt")
    ? { ...error, message: path + error.message.slice("prompt".length) }
    : error;
}

/**
 * Skips `started` events (a retry before any token is invisible to the client); returns the
 * first token, result or error.
 * Reads with next() rather than for-await, which would close the generator on return.
 */
async function nextMeaningful(events: AsyncGenerator<JobEvent>): Promise<JobEvent> {
  for (;;) {
    const next = await events.next();
    if (next.done) throw new PlatformError(500, "internal_error", "the job ended without a result");
    if (next.value.type !== "started") return next.value;
  }
}
