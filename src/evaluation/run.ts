/**
 * One run of an evaluation job by one coordinator: read the dataset (checked again: confined, and
 * the same bytes as when the job was created), score every item not scored by an earlier run
 * through the model queue, then store the result on the job and on the version (or adapter).
 *
 * How each item is scored (docs/evaluation.md):
 * - perplexity: the line's text as a text prompt (the engine adds BOS, as transformers' tokenizer
 *   does), echoed with logprobs and nothing generated; NLL and token count are summed.
 * - accuracy: lm-eval's `_encode_pair`: the context's trailing whitespace moves into the
 *   continuation; the context alone is scored to learn its token count, and each context+choice
 *   text is scored, its continuation being the tokens past the context's; the choice with the
 *   highest summed log-likelihood is the prediction (ties: the first, as numpy's argmax).
 * - exact_match: the prompt continued greedily (temperature 0) until "\n\n", the end of sequence or
 *   max_tokens, as lm-eval's generate_until defaults; the text must equal the answer exactly.
 */
import { endpointQueueName } from "../contracts/engines.ts";
import { PlatformError } from "../contracts/errors.ts";
import type { PromptTokenLogprob } from "../contracts/job.ts";
import { serving } from "../endpoints/rollout.ts";
import { listEndpoints } from "../endpoints/store.ts";
import type { Control } from "../redis/connection.ts";
import type { StoragePolicy } from "../storage/policy.ts";
import { DatasetError, type Item, parseDataset } from "./dataset.ts";
import { summarize } from "./metrics.ts";
import { type Answer, ModelJobs } from "./model-jobs.ts";
import type { EvaluationRecord, ItemScore } from "./record.ts";
import { readDatasetBytes } from "./source.ts";
import { expireScores, isFinal, readRecord, readScores, saveResult, saveScore, updateRecord } from "./store.ts";

export type RunEnd = "succeeded" | "failed" | "cancelled" | "handed_off";

const TICK_MS = 250;

class EvaluationFailure extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.code = code;
  }
}

export async function runEvaluation(
  ctl: Control,
  id: string,
  handoff: AbortSignal,
  storage: StoragePolicy,
): Promise<RunEnd> {
  const record = await readRecord(ctl, id);
  if (!record) return "failed";
  if (isFinal(record.state)) return record.state as RunEnd;
  if (record.cancel_requested) return cancelled(ctl, id);
  await updateRecord(ctl, id, (r) => ({ state: "running", started: r.started ?? Date.now() }));
  let jobs: ModelJobs | undefined;
  let stop: "cancel" | "handoff" | "failed" | undefined;
  const onHandoff = () => {
    stop ??= "handoff";
  };
  handoff.addEventListener("abort", onHandoff, { once: true });
  let done = 0;
  const ticker = setInterval(() => {
    void (async () => {
      const now = await readRecord(ctl, id).catch(() => undefined);
      if (now?.cancel_requested) {
        stop ??= "cancel";
        await jobs?.cancel().catch(() => undefined);
      } else await updateRecord(ctl, id, () => ({ done })).catch(() => undefined);
    })();
  }, TICK_MS);
  try {
    const items = await loadItems(record, storage);
    await checkServed(ctl, record);
    const scores = await readScores(ctl, id);
    done = scores.size;
    jobs = new ModelJobs(
      ctl,
      id,
      record.queue,
      {
        model: record.base.name,
        version: record.base.version,
        ...(record.adapter ? { adapter: record.adapter } : {}),
      },
      record.created_by ?? undefined,
    );
    const pending = items.map((_, i) => i).filter((i) => !scores.has(i));
    const worker = async () => {
      for (let i = pending.shift(); i !== undefined && stop === undefined; i = pending.shift()) {
        const score = await scoreItem(jobs as ModelJobs, `${i}`, items[i] as Item, record.max_tokens).catch(
          (e: unknown) => {
            // The other workers stop taking items: the run is over.
            stop ??= "failed";
            throw e;
          },
        );
        if (score === undefined) return; // cancelled
        await saveScore(ctl, id, i, score);
        scores.set(i, score);
        done++;
      }
    };
    await Promise.all(Array.from({ length: record.concurrency }, worker));
    if (stop === "cancel") return await cancelled(ctl, id);
    if (stop === "handoff") return "handed_off";
    const result = summarize(
      record.metric,
      items.map((_, i) => scores.get(i) as ItemScore),
    );
    const finished = Date.now();
    const stored = {
      ...result,
      dataset: record.dataset,
      dataset_sha256: record.dataset_sha256,
      job_id: id,
      org: record.org,
      model: record.model,
      adapter: record.adapter,
      finished,
    };
    await saveResult(ctl, record.adapter ?? `${record.base.name}@${record.base.version}`, stored);
    await updateRecord(ctl, id, () => ({ state: "succeeded", done: items.length, result, finished }));
    return "succeeded";
  } catch (e) {
    const failure =
      e instanceof EvaluationFailure
        ? e
        : e instanceof PlatformError && e.status < 500
          ? new EvaluationFailure(e.code, e.message)
          : e instanceof DatasetError
            ? new EvaluationFailure("invalid_dataset", e.message)
            : undefined;
    if (!failure) throw e; // BullMQ retries the run; items already scored are kept
    await jobs?.cancel().catch(() => undefined);
    await updateRecord(ctl, id, () => ({
      state: "failed",
      error: { code: failure.code, message: failure.message },
      finished: Date.now(),
    }));
    return "failed";
  } finally {
    clearInterval(ticker);
    if (isFinal((await readRecord(ctl, id).catch(() => undefined))?.state ?? "running"))
      await expireScores(ctl, id).catch(() => undefined);
    handoff.removeEventListener("abort", onHandoff);
    await jobs?.close();
  }
}

async function cancelled(ctl: Control, id: string): Promise<RunEnd> {
  await updateRecord(ctl, id, () => ({ state: "cancelled", finished: Date.now() }));
  return "cancelled";
}

/** The dataset as created: confined again for the key that named it, and byte for byte the same. */
async function loadItems(record: EvaluationRecord, storage: StoragePolicy): Promise<Item[]> {
  let { uri, identity } = record.source;
  const scope = record.source.scope;
  if (scope) {
    const confined = await storage.confine(
      record.dataset,
      { id: scope.key_id, role: scope.role, org: scope.org },
      "dataset",
    );
    ({ uri, identity } = confined);
  }
  const bytes = await readDatasetBytes(uri, identity, record.dataset, storage.s3);
  const parsed = await parseDataset(bytes, record.metric);
  if (parsed.sha256 !== record.dataset_sha256)
    throw new EvaluationFailure(
      "dataset_changed",
      `dataset: ${record.dataset} changed after the evaluation was created; create a new evaluation`,
    );
  return parsed.items;
}

/** Requests to a version no endpoint serves would wait for ever; one at min 0 scales up for them. */
async function checkServed(ctl: Control, record: EvaluationRecord): Promise<void> {
  const endpoints = (await listEndpoints(ctl)).map(serving).filter((e) => endpointQueueName(e) === record.queue);
  if (endpoints.length === 0)
    throw new EvaluationFailure(
      "model_not_deployed",
      `no endpoint serves ${record.base.name}@${record.base.version} any more; deploy it (\`platform inference deploy --model ${record.base.name} --version ${record.base.version}\`) and create the evaluation again`,
    );
  // An endpoint scaled to zero wakes for its queue (as for an online request).
  for (const e of endpoints) await ctl.redis.publish(ctl.keys.scalerWakeup, e.name).catch(() => 0);
}

/** undefined: cancelled on the way. */
async function scoreItem(jobs: ModelJobs, name: string, item: Item, maxTokens: number): Promise<ItemScore | undefined> {
  const scoring = { echo: true, logprobs: true, max_tokens: 0, temperature: 0 };
  switch (item.kind) {
    case "perplexity": {
      const echoed = echoOf(item, await jobs.ask(name, item.text, scoring));
      if (!echoed) return undefined;
      const scored = echoed.filter((t) => t.logprob !== null);
      return { x: -scored.reduce((s, t) => s + (t.logprob as number), 0), tokens: scored.length };
    }
    case "accuracy": {
      // lm-eval's _encode_pair: trailing whitespace of the context belongs to the continuation.
      const context = item.context.trimEnd();
      const spaces = item.context.slice(context.length);
      const [ctx, ...wholes] = await Promise.all([
        jobs.ask(`${name}-c`, context, scoring),
        ...item.choices.map((choice, j) => jobs.ask(`${name}-${j}`, context + spaces + choice, scoring)),
      ]);
      const ctxTokens = echoOf(item, ctx as Answer);
      if (!ctxTokens) return undefined;
      const lls: number[] = [];
      let merged = 0;
      for (const whole of wholes) {
        const tokens = echoOf(item, whole);
        if (!tokens) return undefined;
        if (ctxTokens.some((t, k) => tokens[k]?.token !== t.token)) merged++;
        lls.push(tokens.slice(ctxTokens.length).reduce((s, t) => s + (t.logprob ?? 0), 0));
      }
      const best = lls.indexOf(Math.max(...lls));
      return { x: best === item.answer ? 1 : 0, lls, merged };
    }
    case "exact_match": {
      const answer = await jobs.ask(name, item.prompt, { temperature: 0, max_tokens: maxTokens, stop: ["\n\n"] });
      if (!answer.ok) return failed(item, answer);
      return { x: answer.result.text === item.answer ? 1 : 0 };
    }
  }
}

function echoOf(item: Item, answer: Answer): PromptTokenLogprob[] | undefined {
  if (!answer.ok) return failed(item, answer);
  const logprobs = answer.result.echo?.logprobs;
  if (!logprobs)
    throw new EvaluationFailure(
      "engine_unsupported",
      "the endpoint's engine answered without the prompt's scores (echo with logprobs), which perplexity and accuracy are computed from",
    );
  return logprobs;
}

function failed(item: Item, answer: Extract<Answer, { ok: false }>): undefined {
  if (answer.code === "cancelled") return undefined;
  throw new EvaluationFailure(answer.code, `line ${item.line}: ${answer.message}`);
}
