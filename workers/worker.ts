/**
 * A worker: one replica of one endpoint. It heartbeats into Redis from the
 * moment it starts, takes jobs from its model queue only after a real warm-up
 * inference, streams events back to whoever asked, and drains on shutdown.
 */
import type { Server, ServerResponse } from "node:http";
import { hostname } from "node:os";
import { type Job, UnrecoverableError, WaitingError, type Worker } from "bullmq";
import { endpointQueueName } from "../src/contracts/engines.ts";
import { describeIssues } from "../src/contracts/issues.ts";
import { BATCH_PRIORITY, JobError, type JobEvent, JobPayload, type JobReceipt, type JobResult, receiptOf, type TokenLogprob } from "../src/contracts/job.ts";
import type { EndpointRecord, ReplicaState } from "../src/contracts/records.ts";
import type { Control, RedisClient } from "../src/control/redis.ts";
import { removeReplica, writeReplica } from "../src/control/replicas.ts";
import { PlatformError } from "../src/errors.ts";
import { http } from "../src/node-http.ts";
import { QueueBase } from "../src/queue/base.ts";
import { isCancelled, listenForCancels } from "../src/queue/cancel.ts";
import { keepAnswer } from "../src/queue/kept-answers.ts";
import { MAX_REPLICA_LOSSES } from "../src/queue/reclaim.ts";
import { appendReply } from "../src/queue/replies.ts";
import { DEFAULT_HEARTBEAT_MS } from "../src/settings/queue.ts";
import { causeFields, logger } from "../src/telemetry/log.ts";
import { type JobTrace, traceFieldsOf, traceJob } from "../src/telemetry/tracing.ts";
import type { Source } from "../src/telemetry/vllm-metrics.ts";
import { relabelExposition } from "../src/telemetry/engine-metrics.ts";
import type { WorkerMetrics } from "../src/telemetry/worker-metrics.ts";
import type { Engine, GenerationHooks } from "./engines/engine.ts";
import { Slots } from "./slots.ts";

export type WorkerOptions = {
  ctl: Control;
  endpoint: EndpointRecord;
  replicaId: string;
  /** `describeWeights`: what the replica loads when it is not the artifact as registered (a conversion, a quantized copy). */
  loadEngine: (describeWeights: (weights: string) => void) => Promise<Engine>;
  /** Serve /livez, /readyz (Kubernetes probes) and /metrics (Prometheus) here; undefined: no HTTP server. */
  healthPort?: number;
  /** How often the replica record is rewritten (settings.heartbeats.intervalMs). */
  heartbeatMs?: number;
  /**
   * The engine's own process ended (Engine.lost). The replica is then dead: by default the process
   * exits at once with code 1, and its jobs are handed to other replicas the way a killed replica's
   * are (src/queue/reclaim.ts: by its supervisor at once, else when their locks lapse), each job
   * counting the loss, so that a request that crashes the engine every time ends as `replica_lost`.
   */
  onEngineLost?: (why: string) => void;
};

export type RunningWorker = {
  /** Resolves when the worker is ready (after warm-up), rejects if loading failed. */
  ready: Promise<void>;
  /**
   * Stop taking jobs and finish the in-flight ones; past `deadlineMs` (0: at once) abort them and
   * give their jobs back to the queue, for another replica. Then release everything.
   */
  drain: (options?: { deadlineMs?: number }) => Promise<void>;
  /** Jobs taken and not yet answered (running or waiting for a sequence). */
  inFlight: () => number;
};

const CANCEL_LOOKUP_AFTER_MS = 1000;
const log = logger("worker");
/**
 * Jobs a replica holds per engine sequence: one running, one waiting in `slots` for it, so a
 * finishing sequence starts its next job with no Redis round trip (bench/batch.ts, 8 records in
 * flight on 4 sequences: 0.73 → 1.01 of a direct engine loop's records/s). More would only keep
 * jobs from idle replicas.
 */
const PREFETCH_FACTOR = 2;
/** A job's error and its engine process's exit arrive in either order; this long apart they are one event. */
const ENGINE_EXIT_GRACE_MS = 1_000;
/** After the drain deadline, how long aborted jobs get to be handed back before the drain moves on. */
const RELEASE_GRACE_MS = 3_000;
/** The clean-up after a drain waits this long at most: RedisClient may be gone. */
const STEP_MS = 1_000;

export function startWorker(options: WorkerOptions): RunningWorker {
  const { ctl, endpoint, replicaId } = options;
  const heartbeatMs = options.heartbeatMs ?? DEFAULT_HEARTBEAT_MS;
  const started = Date.now();
  const inFlight = new Map<string, AbortController>();
  /** Jobs holding a sequence; the others in `inFlight` wait in `slots` for one. */
  const generating = new Set<string>();
  /** Jobs aborted by the drain, to be handed back to the queue rather than failed. */
  const releasing = new Set<string>();
  let draining = false;
  const cancelledHere = new Set<string>();
  let state: ReplicaState = "starting";
  let error: string | undefined;
  let weights: string | undefined;
  let engine: Engine | undefined;
  /** Why the engine's process ended, once it has (Engine.lost). */
  let engineLost: string | undefined;
  let slots: Slots;
  let bull: Worker | undefined;
  let subscriber: RedisClient | undefined;
  let health: Server | undefined;
  /** The port the health server listens on (port 0 asks for any free one), once it does. */
  let healthPort: number | undefined;
  // Only where something can scrape them (docs/observability.md); loaded before the first job.
  let metrics: WorkerMetrics | undefined;
  const metricsLoaded =
    options.healthPort === undefined
      ? undefined
      : import("../src/telemetry/worker-metrics.ts").then(({ WorkerMetrics }) => {
          metrics = new WorkerMetrics(endpoint, replicaId, () => ({ running: generating.size, waiting: inFlight.size - generating.size }));
          return metrics;
        });

  const beat = () =>
    writeReplica(ctl, {
      id: replicaId,
      endpoint: endpoint.name,
      model: endpoint.config.model.name,
      version: endpoint.version,
      state,
      pid: process.pid,
      host: hostname(),
      started,
      heartbeat: Date.now(),
      in_flight: inFlight.size,
      parallel: engine?.parallel ?? endpoint.config.resources.parallel,
      error,
      queue_worker: bull?.id,
      queue: endpointQueueName(endpoint),
      heartbeat_ms: heartbeatMs,
      health_port: healthPort,
      weights,
    }, heartbeatMs).catch(() => undefined); // Redis may blip; the next beat retries.
  const heartbeat = setInterval(beat, heartbeatMs);
  void beat();

  if (options.healthPort !== undefined) {
    health = http.createServer((req, res) => {
      if (req.url === "/metrics" && metricsLoaded) return void serveMetrics(metricsLoaded, engine, res);
      const ok = req.url === "/livez" ? state !== "failed" : req.url === "/readyz" ? state === "ready" : false;
      res.writeHead(req.url === "/livez" || req.url === "/readyz" ? (ok ? 200 : 503) : 404, { "content-type": "application/json" });
      res.end(JSON.stringify({ state, replica: replicaId }));
    }).listen(options.healthPort, () => {
      healthPort = (health?.address() as { port: number } | null)?.port;
      void beat(); // published at once: a scraper finds the replica by its record
    });
  }

  const emit = (payload: { reply?: { stream: string } }, jobId: string, event: JobEvent) =>
    payload.reply ? appendReply(ctl.redis, payload.reply.stream, jobId, event) : Promise.resolve();

  /**
   * Hands a job back to the queue (not a failure, so no retry is spent): another replica runs it
   * from the start. If Redis is gone this cannot happen; the job's lock then lapses and BullMQ's
   * stalled-job check requeues it.
   */
  const release = async (job: Job, token: string | undefined): Promise<never> => {
    if (token !== undefined) await job.moveToWait(token);
    throw new WaitingError();
  };

  const handle = async (job: Job, token?: string): Promise<JobResult | JobReceipt> => {
    const jobId = job.id as string;
    const parsed = JobPayload.safeParse(job.data);
    if (!parsed.success) {
      const err: JobError = { code: "invalid_job", status: 400, param: null, message: `invalid job payload: ${describeIssues(parsed.error)}` };
      await emit(job.data ?? {}, jobId, { type: "error", error: err });
      throw new UnrecoverableError(JSON.stringify(err));
    }
    const payload = parsed.data;
    const source: Source = (job.opts.priority ?? 0) >= BATCH_PRIORITY ? "batch" : "online";
    const taken = performance.now();
    if (payload.deadline !== undefined && Date.now() > payload.deadline) {
      throw fail(payload, jobId, new PlatformError(504, "timeout", "the request waited in the queue past its deadline"), source);
    }
    // A worker hears cancellations on pub/sub; only a job that waited long enough to have been
    // cancelled before this worker subscribed needs the Redis lookup.
    const waited = Date.now() - job.timestamp;
    if (cancelledHere.has(jobId) || (waited > CANCEL_LOOKUP_AFTER_MS && (await isCancelled(ctl, jobId)))) {
      throw fail(payload, jobId, new PlatformError(499, "cancelled", "the request was cancelled by its client"), source);
    }
    const abort = new AbortController();
    inFlight.set(jobId, abort);
    if (draining) {
      // Prefetched while the drain began: not started, so back to the queue.
      releasing.add(jobId);
      abort.abort();
    }
    let span: JobTrace | undefined;
    try {
      await slots.acquire(abort.signal, payload.queue_deadline);
      generating.add(jobId);
      if (payload.stream) void emit(payload, jobId, { type: "started", replica: replicaId, attempt: job.attemptsStarted });
      const queuedMs = Date.now() - job.timestamp;
      // Tracing (when on): the queue wait ends here, the inference span starts (docs/tracing.md).
      span = traceJob({
        traceparent: payload.traceparent, enqueuedAt: job.timestamp, queue: job.queueName, jobId, requestId: payload.request_id, kind: payload.kind,
        model: payload.model, version: payload.version, replica: replicaId, attempt: job.attemptsStarted, maxTokens: payload.kind === "embedding" ? undefined : payload.params.max_tokens,
      });
      const started = performance.now();
      let firstText: number | undefined;
      let lastText = started;
      const onText = (text: string, logprobs?: TokenLogprob[]) => {
        const now = performance.now();
        if (firstText === undefined) firstText = now;
        else metrics?.interToken(source, (now - lastText) / 1000);
        lastText = now;
        if (payload.stream) void emit(payload, jobId, logprobs ? { type: "token", text, logprobs } : { type: "token", text });
      };
      let result: JobResult;
      try {
        result = await run(payload, abort.signal, onText);
      } finally {
        // Before the reply's round trip: a prefetched job can use the sequence meanwhile.
        slots.release();
        generating.delete(jobId);
      }
      const ended = performance.now();
      if (releasing.has(jobId)) return await release(job, token);
      result.queued_ms = queuedMs;
      if (result.type === "text") {
        // For the gateway's TTFT of a non-streaming request (src/telemetry/metrics.ts, nonStreamingTtft).
        result.generation_ms = ended - started;
        if (firstText !== undefined) result.first_token_ms = firstText - started;
      }
      metrics?.answered(source, payload.kind, { taken, started, firstText, ended }, result);
      span?.end({ usage: result.usage, finishReason: result.type === "text" ? result.finish_reason : undefined });
      if (log.isEnabled("debug")) log.debug({ request_id: payload.request_id, job_id: jobId, ...traceFieldsOf(payload.traceparent), replica: replicaId, queued_ms: queuedMs, usage: result.usage }, "job done");
      // A batch record's answer is also kept on its job, for a coordinator that resumes (src/queue/kept-answers.ts).
      await Promise.all([emit(payload, jobId, { type: "done", result }), payload.reply && source === "batch" ? keepAnswer(ctl.redis, job, result) : undefined]);
      return payload.reply ? receiptOf(result) : result;
    } catch (e) {
      if (e instanceof WaitingError) throw e;
      if (releasing.has(jobId)) return await release(job, token);
      // The engine's process died under the job (its connection broke first): not the request's
      // failure. The replica goes down and the job is reclaimed with it, so it is left as it is.
      if (await diedWithEngine(e)) return await new Promise<never>(() => undefined);
      span?.end({ error: toJobError(e) });
      throw fail(payload, jobId, e, source);
    } finally {
      // A job handed back to the queue (drain): its span ends here; ended spans ignore this.
      span?.end({ released: true });
      inFlight.delete(jobId);
      releasing.delete(jobId);
    }
  };

  const run = async (payload: JobPayload, signal: AbortSignal, onToken: GenerationHooks["onText"]): Promise<JobResult> => {
    if (!engine) throw new PlatformError(503, "not_ready", "replica is not ready");
    if (payload.kind === "embedding") {
      const out = await engine.embed(payload.input);
      return { type: "embedding", embeddings: out.embeddings, usage: out.usage, replica: replicaId };
    }
    const request =
      payload.kind === "chat"
        ? {
            kind: "chat" as const,
            messages: payload.messages,
            params: payload.params,
            tools: payload.tools && payload.tool_choice !== "none" ? { tools: payload.tools, tool_choice: payload.tool_choice, parallel_tool_calls: payload.parallel_tool_calls } : undefined,
          }
        : { kind: "prompt" as const, prompt: payload.prompt, params: payload.params };
    // Always observed: the first text's time is reported even when nothing is streamed.
    const out = await engine.generate(request, { signal, onText: onToken });
    return { type: "text", ...out, replica: replicaId };
  };

  /** Whether `e` came from the engine's process dying: it ends within ENGINE_EXIT_GRACE_MS of the error. */
  const diedWithEngine = async (e: unknown): Promise<boolean> => {
    if (engineLost !== undefined) return true;
    if (!engine?.lost || (e instanceof PlatformError && e.status < 500)) return false;
    const lost = await Promise.race([engine.lost, new Promise<undefined>((r) => setTimeout(() => r(undefined), ENGINE_EXIT_GRACE_MS).unref())]);
    return lost !== undefined;
  };

  /** Report the failure to the waiting client and make BullMQ fail the job without retrying it. */
  const fail = (payload: JobPayload, jobId: string, e: unknown, source: Source): UnrecoverableError => {
    const err = toJobError(e);
    metrics?.failed(source, payload.kind, err);
    // The full story (stack included) stays here; the gateway logs the message under the same request id.
    if (!(e instanceof PlatformError)) log.error({ request_id: payload.request_id, job_id: jobId, ...traceFieldsOf(payload.traceparent), ...causeFields(e) }, `job ${jobId} failed`);
    void emit(payload, jobId, { type: "error", error: err });
    return new UnrecoverableError(JSON.stringify(err));
  };

  const ready = (async () => {
    try {
      engine = await options.loadEngine((w) => {
        weights = w;
      });
      await engine.warmup();
    } catch (e) {
      state = "failed";
      error = e instanceof Error ? e.message : String(e);
      await beat();
      throw e;
    }
    await metricsLoaded;
    subscriber = await listenForCancels(ctl, (jobId) => {
      inFlight.get(jobId)?.abort();
      cancelledHere.add(jobId);
      if (cancelledHere.size > 10_000) cancelledHere.clear();
    });
    slots = new Slots(engine.parallel);
    bull = new QueueBase(ctl).workerNamed(endpointQueueName(endpoint), handle, {
      // Jobs beyond the engine's sequences wait in `slots` (workers/slots.ts).
      concurrency: engine.parallel * PREFETCH_FACTOR,
      // A dead replica's jobs are taken back as soon as its supervisor or the scaler learns of the
      // death (src/queue/reclaim.ts). Should nobody notice, its lock (renewed every 2.5 s) lapses
      // within 5 s and a check (every 2 s) requeues the job: 9 s at most, not BullMQ's default 30 s.
      // One retry: a job that kills a second replica is failed (docs/fleet.md).
      lockDuration: 5_000,
      stalledInterval: 2_000,
      maxStalledCount: MAX_REPLICA_LOSSES,
      // Started only once the heartbeat names this BullMQ worker: a job it holds is always traceable to it.
      autorun: false,
    });
    state = "ready";
    await beat();
    void engine.lost?.then(async (why) => {
      if (draining) return;
      engineLost = why;
      state = "failed";
      error = `the engine stopped: ${why}`;
      log.error({ replica: replicaId }, `replica ${replicaId}: ${error}`);
      await beat(); // so that status says why before the process goes
      (options.onEngineLost ?? (() => process.exit(1)))(why);
    });
    void bull.run().catch((e: Error) => log.error({ replica: replicaId, err: e }, "the queue worker stopped"));
    await ctl.redis.set(ctl.keys.servedOnce(endpoint.name), String(Date.now()));
  })();

  const abortAll = (which: (jobId: string) => boolean) => {
    for (const [jobId, abort] of inFlight) {
      if (!which(jobId)) continue;
      releasing.add(jobId);
      abort.abort();
    }
  };

  const drain = async ({ deadlineMs = 30_000 }: { deadlineMs?: number } = {}) => {
    if (state !== "failed") state = "draining";
    draining = true;
    void beat();
    // Jobs waiting for a sequence have not started: another replica can take them now.
    abortAll((jobId) => !generating.has(jobId));
    const closing = bull?.close() ?? Promise.resolve(); // resolves once in-flight jobs have ended
    let timer: NodeJS.Timeout | undefined;
    const pastDeadline = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        abortAll(() => true);
        setTimeout(resolve, RELEASE_GRACE_MS).unref();
      }, deadlineMs);
    });
    await Promise.race([closing.catch(() => undefined), pastDeadline]);
    clearTimeout(timer);
    clearInterval(heartbeat);
    health?.close();
    await Promise.all([
      bounded(subscriber?.quit()),
      bounded(engine?.dispose()),
      state !== "failed" ? bounded(removeReplica(ctl, endpoint.name, replicaId)) : undefined,
    ]);
  };

  return { ready, drain, inFlight: () => inFlight.size };
}

/** The replica's metrics, then its engine's own (vLLM's) with the replica's labels; an engine that cannot answer only loses its part. */
function serveMetrics(loaded: Promise<WorkerMetrics>, engine: Engine | undefined, res: ServerResponse): void {
  loaded
    .then(async (m) => {
      const own = await m.registry.metrics();
      const names = new Set(m.registry.getMetricsAsArray().map((metric) => metric.name));
      const engineText = engine?.metrics ? await engine.metrics().then((text) => relabelExposition(text, m.labels, names)).catch(() => "") : "";
      res.writeHead(200, { "content-type": m.registry.contentType });
      res.end(engineText ? `${own}\n${engineText}` : own);
    })
    .catch((e: unknown) => {
      res.writeHead(500, { "content-type": "text/plain" });
      res.end(`metrics unavailable: ${e instanceof Error ? e.message : String(e)}\n`);
    });
}

function bounded(work: Promise<unknown> | undefined): Promise<unknown> {
  return Promise.race([work?.catch(() => undefined), new Promise((r) => setTimeout(r, STEP_MS).unref())]);
}

export function toJobError(e: unknown): JobError {
  if (e instanceof PlatformError) return { code: e.code, message: e.message, status: e.status, param: e.param, retry_after: e.retryAfter };
  return { code: "engine_error", message: e instanceof Error ? e.message : String(e), status: 500, param: null };
}
