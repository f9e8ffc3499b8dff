/**
 * Creating, reading, listing and cancelling evaluation jobs, and reading their results: what the
 * gateway calls. The work is done by whichever process runs an evaluation coordinator.
 *
 * A request is checked whole before it is queued: the target resolves (an adapter to its newest
 * version on that base), an endpoint serves it, and every line of the dataset parses.
 */
import { randomBytes } from "node:crypto";
import { isAbsolute } from "node:path";
import type { Queue } from "bullmq";
import type { Files } from "../files/store.ts";
import { endpointQueueName } from "../contracts/engines.ts";
import { PlatformError, parseRequest } from "../contracts/errors.ts";
import { EVALUATION_QUEUE, queueName } from "../contracts/naming.ts";
import { canSee, isOperator, type Principal } from "../contracts/orgs.ts";
import { DEFAULT_ORG } from "../contracts/orgs.ts";
import { serving } from "../endpoints/rollout.ts";
import { listEndpoints } from "../endpoints/store.ts";
import { QueueBase } from "../queue/base.ts";
import type { Control } from "../redis/connection.ts";
import { taskOf, type VersionRef } from "../models/record.ts";
import { listModelVersions, resolveModelVersion } from "../models/versions.ts";
import { parseStorageUri, StorageError } from "../storage/index.ts";
import { StoragePolicy } from "../storage/policy.ts";
import type { EvaluationJobData } from "./coordinator.ts";
import { DatasetError, parseDataset } from "./dataset.ts";
import { type Comparison, compare } from "./metrics.ts";
import {
  CreateEvaluationRequest,
  type EvaluationRecord,
  parseTarget,
  publicRecord,
  type StoredResult,
} from "./record.ts";
import { readDatasetBytes } from "./source.ts";
import {
  isFinal,
  listIds,
  readRecord,
  readResults,
  readScores,
  resultTargets,
  saveRecord,
  updateRecord,
} from "./store.ts";

const DEFAULT_MAX_TOKENS = 256;
const DEFAULT_CONCURRENCY = 8;

export type Viewer = Principal;
export type PublicEvaluation = ReturnType<typeof publicRecord>;

export class Evaluations {
  private readonly ctl: Control;
  private readonly queues: QueueBase;
  private readonly queue: Queue<EvaluationJobData>;
  private readonly storage: StoragePolicy;
  private readonly files: Files | undefined;

  constructor(ctl: Control, options: { queue?: string; storage?: StoragePolicy; files?: Files } = {}) {
    this.ctl = ctl;
    this.storage = options.storage ?? new StoragePolicy();
    this.files = options.files;
    this.queues = new QueueBase(ctl);
    this.queue = this.queues.queueNamed<EvaluationJobData>(options.queue ?? EVALUATION_QUEUE);
  }

  async create(body: unknown, viewer?: Viewer): Promise<PublicEvaluation> {
    const request = parseRequest(CreateEvaluationRequest, body);
    const target = parseTarget(request.model) as NonNullable<ReturnType<typeof parseTarget>>;
    const base = await resolveModelVersion(this.ctl, target.model, target.version, viewer);
    if (taskOf(base) === "embed")
      throw new PlatformError(
        400,
        "model_not_generative",
        `model: ${base.name}@${base.version} is an embedding model; evaluations score text with a generative model`,
        "model",
      );
    const adapter = target.adapter ? await this.resolveAdapter(target.adapter, base, viewer) : null;
    const queue = await this.servingQueue(base.name, base.version);
    const source = await this.locate(request.dataset, viewer);
    const bytes = await readDatasetBytes(source.uri, source.identity, request.dataset, this.storage.s3);
    let dataset: Awaited<ReturnType<typeof parseDataset>>;
    try {
      dataset = await parseDataset(bytes, request.metric);
    } catch (e) {
      if (e instanceof DatasetError)
        throw new PlatformError(400, "invalid_dataset", `dataset: ${e.message}`, "dataset");
      throw e;
    }
    const id = `eval_${randomBytes(12).toString("hex")}`;
    const record: EvaluationRecord = {
      id,
      object: "evaluation",
      model: `${base.name}@${base.version}${target.adapter ? `:${target.adapter}` : ""}`,
      base: { name: base.name, version: base.version },
      adapter,
      metric: dataset.metric,
      dataset: request.dataset,
      dataset_sha256: dataset.sha256,
      items: dataset.items.length,
      max_tokens: request.max_tokens ?? DEFAULT_MAX_TOKENS,
      concurrency: request.concurrency ?? DEFAULT_CONCURRENCY,
      queue,
      state: "queued",
      done: 0,
      result: null,
      error: null,
      created_by: viewer?.id ?? null,
      org: viewer?.org ?? DEFAULT_ORG,
      source,
      created: Date.now(),
      started: null,
      finished: null,
    };
    await saveRecord(this.ctl, record);
    try {
      await this.queue.add(
        "evaluate",
        { evaluation_id: id },
        { jobId: id, removeOnComplete: true, removeOnFail: 1000 },
      );
    } catch (e) {
      console.error(`[evaluation ${id}] could not be queued:`, e);
      await updateRecord(this.ctl, id, () => ({
        state: "failed",
        error: { code: "queue_unavailable", message: "the evaluation could not be queued; create it again" },
        finished: Date.now(),
      }));
      throw new PlatformError(503, "queue_unavailable", `could not queue evaluation ${id}; retry shortly`, null, 1);
    }
    return publicRecord(record);
  }

  async get(id: string, viewer?: Viewer): Promise<PublicEvaluation> {
    return publicRecord(await this.visible(id, viewer));
  }

  async list(viewer: Viewer | undefined, limit = 20): Promise<{ object: "list"; data: PublicEvaluation[] }> {
    const ids = await listIds(this.ctl, viewer?.org ?? DEFAULT_ORG, Math.min(Math.max(limit, 1), 100) * 4);
    const data: PublicEvaluation[] = [];
    for (const id of ids) {
      const r = await readRecord(this.ctl, id);
      if (r && (!viewer || canSee(viewer, { id: r.created_by, org: r.org }))) data.push(publicRecord(r));
      if (data.length >= limit) break;
    }
    return { object: "list", data };
  }

  async cancel(id: string, viewer?: Viewer): Promise<PublicEvaluation> {
    const record = await this.visible(id, viewer);
    if (isFinal(record.state)) return publicRecord(record);
    if (record.state === "queued") {
      // Not started: nothing to stop; the coordinator that takes it finds it cancelled.
      const removed = await this.queue.remove(id).catch(() => 0);
      if (removed === 1) await updateRecord(this.ctl, id, () => ({ state: "cancelled", finished: Date.now() }));
    }
    await updateRecord(this.ctl, id, () => ({ cancel_requested: true }));
    return this.get(id, viewer);
  }

  /** The latest results on `<model>@<version>` or an adapter's `<name>@<version>`, as the viewer may see them. */
  async results(target: string, viewer?: Viewer): Promise<StoredResult[]> {
    return readResults(this.ctl, target, viewer && !isOperator(viewer) ? viewer.org : undefined);
  }

  /** Every target's results the viewer may see: `{target, results}` for each. */
  async allResults(viewer?: Viewer): Promise<{ target: string; results: StoredResult[] }[]> {
    const out: { target: string; results: StoredResult[] }[] = [];
    for (const target of await resultTargets(this.ctl)) {
      const results = await this.results(target, viewer);
      if (results.length > 0) out.push({ target, results });
    }
    return out;
  }

  /** b − a of two finished evaluations of one metric, with its 95% interval (paired on the same dataset). */
  async compare(
    aId: string,
    bId: string,
    viewer?: Viewer,
  ): Promise<{ a: PublicEvaluation; b: PublicEvaluation } & Comparison> {
    const [a, b] = [await this.visible(aId, viewer), await this.visible(bId, viewer)];
    for (const [r, param] of [
      [a, "a"],
      [b, "b"],
    ] as const)
      if (r.state !== "succeeded" || !r.result)
        throw new PlatformError(409, "evaluation_not_finished", `${param}: evaluation ${r.id} is ${r.state}`, param);
    if (a.metric !== b.metric)
      throw new PlatformError(
        400,
        "invalid_request",
        `evaluations ${a.id} (${a.metric}) and ${b.id} (${b.metric}) measure different metrics`,
        "b",
      );
    const scores = async (r: EvaluationRecord) => {
      const map = await readScores(this.ctl, r.id);
      return map.size === r.items
        ? Array.from({ length: r.items }, (_, i) => map.get(i) as NonNullable<ReturnType<typeof map.get>>)
        : undefined;
    };
    const ra = a.result as NonNullable<EvaluationRecord["result"]>;
    const rb = b.result as NonNullable<EvaluationRecord["result"]>;
    const comparison = compare(
      a.metric,
      { value: ra.value, stderr: ra.stderr, sha256: a.dataset_sha256, scores: await scores(a) },
      { value: rb.value, stderr: rb.stderr, sha256: b.dataset_sha256, scores: await scores(b) },
    );
    return { a: publicRecord(a), b: publicRecord(b), ...comparison };
  }

  async close(): Promise<void> {
    await this.queues.close();
  }

  private async visible(id: string, viewer?: Viewer): Promise<EvaluationRecord> {
    const record = /^eval_[0-9a-f]{24}$/.test(id) ? await readRecord(this.ctl, id) : undefined;
    if (!record || (viewer && !canSee(viewer, { id: record.created_by, org: record.org })))
      throw new PlatformError(404, "evaluation_not_found", `no evaluation ${id}`, "id");
    return record;
  }

  /** The adapter's newest version whose base is `model`@`version`, as `<name>@<version>`. */
  private async resolveAdapter(name: string, base: VersionRef, viewer?: Viewer): Promise<string> {
    const { name: model, version } = base;
    const versions = (await listModelVersions(this.ctl, name, viewer)).filter(
      (v) => v.adapter?.base.name === model && v.adapter.base.version === version,
    );
    const newest = versions.at(-1);
    if (!newest)
      throw new PlatformError(
        404,
        "adapter_not_found",
        `model: no adapter "${name}" of ${model}@${version} is registered (\`platform training list\` shows adapters and their bases)`,
        "model",
      );
    return `${newest.name}@${newest.version}`;
  }

  /** The queue of an endpoint serving `model`@`version` (the default queue when one serves it). */
  private async servingQueue(model: string, version: string): Promise<string> {
    const endpoints = (await listEndpoints(this.ctl))
      .map(serving)
      .filter((e) => e.config.model.name === model && e.version === version);
    if (endpoints.length === 0)
      throw new PlatformError(
        409,
        "model_not_deployed",
        `model: no endpoint serves ${model}@${version}; deploy it first (\`platform inference deploy --model ${model} --version ${version}\`, --min-replicas 0 is fine: it scales up for the evaluation)`,
        "model",
      );
    const queues = endpoints.map(endpointQueueName);
    const byDefault = queueName(model, version);
    return queues.includes(byDefault) ? byDefault : (queues[0] as string);
  }

  /** Where the dataset is: an uploaded file, or a URI confined to the viewer's storage areas. */
  private async locate(dataset: string, viewer?: Viewer): Promise<EvaluationRecord["source"]> {
    if (/^file-[A-Za-z0-9]+$/.test(dataset)) {
      if (!this.files)
        throw new PlatformError(400, "invalid_request", "dataset: uploaded files are not available here", "dataset");
      return { uri: await this.files.uri(dataset, viewer) };
    }
    if (dataset.endsWith("/"))
      throw new PlatformError(
        400,
        "invalid_uri",
        `dataset: "${dataset}" names a directory; give the JSONL file`,
        "dataset",
      );
    if (viewer) {
      const confined = await this.storage.confine(dataset, viewer, "dataset");
      return {
        uri: confined.uri,
        ...(confined.identity ? { identity: confined.identity } : {}),
        scope: { key_id: viewer.id, role: viewer.role, org: viewer.org },
      };
    }
    try {
      parseStorageUri(dataset);
    } catch (e) {
      if (e instanceof StorageError) throw new PlatformError(400, "invalid_uri", e.message, "dataset");
      throw e;
    }
    if (!/^[a-z][a-z0-9+.-]+:/i.test(dataset) && !isAbsolute(dataset))
      throw new PlatformError(400, "invalid_uri", `dataset: "${dataset}" is a relative path`, "dataset");
    return { uri: dataset };
  }
}
