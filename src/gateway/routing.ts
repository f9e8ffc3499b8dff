/**
 * Which endpoint and version serve a request. `"model": "name"` goes to the
 * endpoint's own version, or to a variant its A/B test picks; `"name@v3"`
 * pins a deployed version. Endpoint records and A/B tests are cached in the
 * gateway and refreshed on every change notice, so routing costs no Redis
 * round trip on the hot path. A change made through this gateway is seen by
 * its next request, without waiting for the notice to come back from Redis.
 */
import { type AbTest, pickVariant } from "../abtests/record.ts";
import { NAME_PATTERN, VERSION_PATTERN } from "../contracts/deployment.ts";
import type { Endpoint } from "../endpoints/record.ts";
import { type ModelTask, type PipelineSummary, type RegisteredVersion, taskOf } from "../models/record.ts";
import { readAbTests } from "../abtests/store.ts";
import { serving } from "../endpoints/rollout.ts";
import { readEndpoints } from "../endpoints/store.ts";
import type { InvalidEntry } from "../redis/stored.ts";
import type { Control } from "../redis/connection.ts";
import { type Subscription, subscribe } from "../redis/subscription.ts";
import { PlatformError, withDetail } from "../contracts/errors.ts";
import { withinRedisWait } from "../redis/wait.ts";
import { listModelVersions, resolveModelVersion } from "../models/versions.ts";
import { pickAdapterVersion } from "../models/adapter-register.ts";
import { mayUse, type NameViewer } from "../models/owners.ts";
import { type PromptBound, promptBound } from "./input-bounds.ts";

/**
 * `name`: the endpoint the client named; `endpoint`: the deployment that serves this request
 * (the endpoint itself or one of its A/B variants); `model`/`version`: what it runs; `abtest`:
 * the endpoint has a test, so the outcome is counted per variant; `bound`: what the gateway
 * checks a prompt against before enqueueing (src/gateway/input-bounds.ts); `task`: what the version serves
 * (undefined when its record cannot be read: the worker's engine then has the last word).
 */
export type Target = {
  name: string;
  endpoint: Endpoint;
  model: string;
  version: string;
  abtest: boolean;
  bound: PromptBound | undefined;
  task: ModelTask | undefined;
  /** An image model's pipeline (sizes it takes), from its record. */
  pipeline?: PipelineSummary;
  /** `model: "<endpoint>:<adapter>"`: the adapter version the job applies, `<name>@<version>` (docs/adapters.md). */
  adapter?: string;
  /** What metrics and usage name the request by: `name`, or `<endpoint>:<adapter>`. */
  label: string;
};

/**
 * What the gateway knows of a deployed version without a Redis round trip: its prompt bound, its
 * task, and the organization that made it (src/models/owners.ts; undefined: the operator's).
 */
type VersionFacts = {
  bound: PromptBound | undefined;
  task: ModelTask | undefined;
  pipeline?: PipelineSummary;
  owner?: string;
};

/**
 * Who is asking: the API key's id and the request's headers (sticky A/B tests), and its
 * organization and role (what another organization made is answered as if it did not exist).
 */
export type Caller = { keyId?: string; header: (name: string) => string | undefined; viewer?: NameViewer };

/** The 404 for a model that does not exist, the same for one another organization made. */
function unknownModel(name: string): PlatformError {
  return new PlatformError(
    404,
    "model_not_found",
    `The model \`${name}\` does not exist or you do not have access to it. GET /v1/models lists the models served here.`,
    "model",
  );
}

const MAX_STALENESS_MS = 2000;

export class Router {
  private readonly ctl: Control;
  private cache = new Map<string, Endpoint>();
  /** Each endpoint's deployments by version: its own and its variants (retiring ones left out). */
  private deployments = new Map<string, Map<string, Endpoint>>();
  private tests = new Map<string, AbTest>();
  private skipped: InvalidEntry[] = [];
  /** Per model@version, which never changes once registered. */
  private readonly facts = new Map<string, VersionFacts>();
  /** Adapter versions by adapter name, with when they were read (`adapterVersions`). */
  private readonly adapters = new Map<string, { at: number; versions: RegisteredVersion[] }>();
  private loadedAt = 0;
  /** Counts change notices: a load that began before the latest one may hold what it changed. */
  private changes = 0;
  private loadedChanges = -1;
  private loading: { changes: number; done: Promise<void> } | undefined;
  private subscription: Subscription | undefined;

  constructor(ctl: Control) {
    this.ctl = ctl;
  }

  async start(): Promise<void> {
    // A notice may have been missed while the subscription was down: read everything again then.
    this.subscription = await subscribe(this.ctl, [this.ctl.keys.endpointEvents], () => this.changed(), {
      onListening: () => this.changed(),
    });
    await this.current();
  }

  /** An endpoint or A/B test changed: the next request reads them again. */
  changed(): void {
    this.changes++;
  }

  async endpoints(): Promise<Endpoint[]> {
    await this.current();
    return [...this.cache.values()];
  }

  /** Endpoint records skipped at the last refresh because they do not parse. */
  async invalid(): Promise<InvalidEntry[]> {
    await this.current();
    return this.skipped;
  }

  async resolve(requested: string, caller?: Caller): Promise<Target> {
    const colon = requested.indexOf(":");
    if (colon < 0) return this.resolveModel(requested, caller);
    const adapterName = requested.slice(colon + 1);
    const target = await this.resolveModel(requested.slice(0, colon), caller);
    if (!NAME_PATTERN.test(adapterName))
      throw new PlatformError(
        404,
        "model_not_found",
        'The model does not exist: an adapter is named "<endpoint>:<adapter>", the adapter\'s name 1-63 letters, digits, ".", "_" or "-". GET /v1/models lists the adapters served here.',
        "model",
      );
    const adapter = await this.adapterFor(adapterName, target, caller?.viewer);
    return { ...target, adapter: `${adapter.name}@${adapter.version}`, label: `${target.name}:${adapterName}` };
  }

  /**
   * The newest version of adapter `name` whose base is what the target runs (its model@version),
   * or a 404 saying what is missing and how to fix it.
   */
  private async adapterFor(name: string, t: Target, viewer: NameViewer): Promise<RegisteredVersion> {
    const versions = (await this.adapterVersions(name)).filter((v) => mayUse(viewer, v.owner));
    return pickAdapterVersion(versions, name, { name: t.model, version: t.version }, t.name);
  }

  /** Adapter versions by name, oldest first, read at most every MAX_STALENESS_MS per name. */
  private async adapterVersions(name: string): Promise<RegisteredVersion[]> {
    const known = this.adapters.get(name);
    if (known && Date.now() - known.at <= MAX_STALENESS_MS) return known.versions;
    const versions = (await listModelVersions(this.ctl, name)).filter((v) => v.kind === "adapter" && v.adapter);
    if (this.adapters.size >= 1000) this.adapters.clear();
    this.adapters.set(name, { at: Date.now(), versions });
    return versions;
  }

  /**
   * What `/v1/models` lists for adapters: `<endpoint>:<adapter>` for each adapter with a version
   * whose base is the endpoint's own serving version, of those `viewer` may see.
   */
  async adapterEntries(viewer: NameViewer): Promise<{ id: string; created: number }[]> {
    await this.current();
    const all = await listModelVersions(this.ctl, undefined, viewer);
    const out = new Map<string, number>();
    for (const e of this.cache.values()) {
      if (e.variant_of || !(await this.visible(e, viewer))) continue;
      for (const v of all) {
        if (v.kind !== "adapter" || v.adapter?.base.name !== e.config.model.name) continue;
        if (v.adapter.base.version !== e.version) continue;
        const id = `${e.name}:${v.name}`;
        out.set(id, Math.max(out.get(id) ?? 0, Math.floor(v.created / 1000)));
      }
    }
    return [...out.entries()].sort((a, b) => (a[0] < b[0] ? -1 : 1)).map(([id, created]) => ({ id, created }));
  }

  /** Whether `viewer` may see the endpoint: what it serves is the operator's or its organization's. */
  async visible(endpoint: Endpoint, viewer: NameViewer): Promise<boolean> {
    return mayUse(viewer, (await this.factsOf(endpoint)).owner);
  }

  private async resolveModel(model: string, caller?: Caller): Promise<Target> {
    const at = model.indexOf("@");
    const name = at < 0 ? model : model.slice(0, at);
    const pinned = at < 0 ? undefined : model.slice(at + 1);
    if (!NAME_PATTERN.test(name) || (pinned !== undefined && !VERSION_PATTERN.test(pinned))) {
      // Unknown, as OpenAI answers; the name itself is not echoed back, it may be anything.
      throw new PlatformError(
        404,
        "model_not_found",
        'The model does not exist: model names are 1-63 letters, digits, ".", "_" or "-", starting with a letter or digit, optionally followed by @<version>. GET /v1/models lists the models served here.',
        "model",
      );
    }
    await this.current();
    const own = this.cache.get(name);
    if (!own || own.variant_of || !(await this.visible(own, caller?.viewer))) throw unknownModel(name);
    const versions = this.deployments.get(name) ?? new Map([[own.version, own]]);
    const test = this.tests.get(name);
    let endpoint = own;
    if (pinned !== undefined) {
      const deployment = versions.get(pinned);
      if (!deployment) {
        throw new PlatformError(
          404,
          "model_not_found",
          `Version \`${pinned}\` of \`${name}\` is not deployed; deployed: ${[...versions.keys()].join(", ")}. Name the model alone for its default routing.`,
          "model",
        );
      }
      endpoint = deployment;
    } else if (test?.state === "running" || test?.serving) {
      const variant = pickVariant(
        test.state === "running" ? test.split : (test.serving as AbTest["split"]),
        stickyValue(test, caller),
      );
      endpoint = versions.get(variant.version) ?? own;
    } else if (test?.state === "stopping" && test.keep !== undefined) {
      endpoint = versions.get(test.keep) ?? own;
    }
    const { bound, task, pipeline } = await this.factsOf(endpoint);
    return {
      name,
      endpoint,
      model: endpoint.config.model.name,
      version: endpoint.version,
      abtest: test !== undefined,
      bound,
      task,
      pipeline,
      label: name,
    };
  }

  private async factsOf(endpoint: Endpoint): Promise<VersionFacts> {
    const key = `${endpoint.config.model.name}@${endpoint.version}\n${endpoint.config.runtime.max_model_len ?? ""}\n${endpoint.framework}`;
    const known = this.facts.get(key);
    if (known) return known;
    // Without the model's record there is no bound or task here; the worker still checks exactly.
    const model = await resolveModelVersion(this.ctl, endpoint.config.model.name, endpoint.version).catch(
      () => undefined,
    );
    const facts: VersionFacts = {
      bound: promptBound(endpoint.framework, endpoint.config.runtime.max_model_len, model?.gguf ?? model?.checkpoint),
      task: model ? taskOf(model) : undefined,
      pipeline: model?.pipeline,
      owner: model?.owner,
    };
    if (this.facts.size > 1000) this.facts.clear();
    if (model) this.facts.set(key, facts);
    return facts;
  }

  /** Loads the records unless the cache holds every change noticed so far and is under MAX_STALENESS_MS old. */
  private async current(): Promise<void> {
    if (this.loadedChanges === this.changes && Date.now() - this.loadedAt <= MAX_STALENESS_MS) return;
    // A load begun before the latest change may have read the old records: it does not count.
    if (this.loading && this.loading.changes !== this.changes) await this.loading.done.catch(() => undefined);
    this.loading ??= { changes: this.changes, done: this.load(this.changes) };
    return this.loading.done;
  }

  private async load(changes: number): Promise<void> {
    try {
      let read: Awaited<ReturnType<typeof readEndpoints>>;
      let tests: Map<string, AbTest>;
      try {
        [read, tests] = await withinRedisWait(
          Promise.all([readEndpoints(this.ctl), readAbTests(this.ctl)]),
          this.ctl.redis,
        );
      } catch (e) {
        // Redis away: route on what is known (admission answers 503 next); knowing nothing, answer it here.
        if (this.loadedAt > 0) {
          // Tried again after MAX_STALENESS_MS, not by every request meanwhile.
          this.loadedAt = Date.now();
          this.loadedChanges = changes;
          return;
        }
        throw withDetail(
          new PlatformError(503, "queue_unavailable", "the endpoint registry is unavailable, retry shortly", null, 1),
          e,
        );
      }
      // While an update rolls out, its endpoint's traffic goes where the previous deployment serves.
      const endpoints = read.endpoints.map(serving);
      this.tests = tests;
      this.cache = new Map(endpoints.map((e) => [e.name, e]));
      const deployments = new Map<string, Map<string, Endpoint>>();
      for (const e of endpoints) {
        if (e.retiring) continue;
        const owner = e.variant_of ?? e.name;
        const versions = deployments.get(owner) ?? new Map<string, Endpoint>();
        // The endpoint's own deployment wins if a variant ever shares its version.
        if (!e.variant_of || !versions.has(e.version)) versions.set(e.version, e);
        deployments.set(owner, versions);
      }
      this.deployments = deployments;
      this.skipped = read.invalid;
      this.loadedAt = Date.now();
      this.loadedChanges = changes;
    } finally {
      this.loading = undefined;
    }
  }

  async close(): Promise<void> {
    await this.subscription?.close();
  }
}

/** The value a sticky test keys its variant on; undefined (a fresh draw) when it is not sticky or the caller has none. */
function stickyValue(test: AbTest, caller: Caller | undefined): string | undefined {
  if (!test.sticky || !caller) return undefined;
  if (test.sticky === "key") return caller.keyId;
  return caller.header(test.sticky.slice("header:".length));
}

/**
 * Refuses a route the target's model does not serve (an embedding model asked for text, or a
 * generative one for embeddings), saying which route fits and how to register it for the other.
 * The task came with the target, so the check costs nothing per request.
 */
export function requireTask(t: Target, needed: ModelTask): void {
  if (t.task === undefined || t.task === needed) return;
  if (t.task === "image") {
    throw new PlatformError(
      400,
      needed === "embed" ? "model_not_embedding" : "model_not_generative",
      `The model \`${t.name}\` makes images: use /v1/images/generations with it.`,
      "model",
    );
  }
  if (needed === "image") {
    const route = t.task === "embed" ? "/v1/embeddings" : "/v1/chat/completions or /v1/completions";
    throw new PlatformError(
      400,
      "model_not_image",
      `The model \`${t.name}\` serves ${t.task === "embed" ? "embeddings" : "text generation"}, not images: use ${route} with it. Images come from a diffusers pipeline registered with task image (docs/images.md).`,
      "model",
    );
  }
  if (needed === "embed") {
    throw new PlatformError(
      400,
      "model_not_embedding",
      `The model \`${t.name}\` serves text generation, not embeddings: use /v1/chat/completions or /v1/completions with it, or register the model with \`--task embed\` (platform training submit) and deploy that version to embed with it.`,
      "model",
    );
  }
  throw new PlatformError(
    400,
    "model_not_generative",
    `The model \`${t.name}\` is an embedding model: use /v1/embeddings with it. A decoder model registered with \`--task embed\` generates only as a version registered with \`--task generate\`.`,
    "model",
  );
}
