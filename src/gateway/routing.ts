/**
 * Which endpoint and version serve a request. Endpoint records are cached in
 * the gateway and refreshed on every change notice, so routing costs no Redis
 * round trip on the hot path.
 */
import type { RedisClient } from "../control/redis.ts";
import { NAME_PATTERN } from "../contracts/deployment.ts";
import type { EndpointRecord } from "../contracts/records.ts";
import { readEndpoints } from "../control/endpoints.ts";
import type { InvalidRecord } from "../control/invalid-records.ts";
import { type Control, duplicate } from "../control/redis.ts";
import { PlatformError, withDetail } from "../errors.ts";
import { withinRedisWait } from "../queue/admission.ts";
import { resolveModelVersion } from "../registry/versions.ts";
import { type PromptBound, promptBound } from "./limits.ts";

/** `bound`: what the gateway checks a prompt against before enqueueing (src/gateway/limits.ts). */
export type Target = { endpoint: EndpointRecord; model: string; version: string; bound: PromptBound | undefined };

const MAX_STALENESS_MS = 2000;

export class Router {
  private readonly ctl: Control;
  private cache = new Map<string, EndpointRecord>();
  private skipped: InvalidRecord[] = [];
  /** Per model@version, which never changes once registered. */
  private readonly bounds = new Map<string, PromptBound | undefined>();
  private loadedAt = 0;
  private loading: Promise<void> | undefined;
  private subscriber: RedisClient | undefined;

  constructor(ctl: Control) {
    this.ctl = ctl;
  }

  async start(): Promise<void> {
    this.subscriber = duplicate(this.ctl);
    await this.subscriber.subscribe(this.ctl.keys.endpointEvents);
    this.subscriber.on("message", () => {
      this.loadedAt = 0;
    });
    await this.refresh();
  }

  async endpoints(): Promise<EndpointRecord[]> {
    if (Date.now() - this.loadedAt > MAX_STALENESS_MS) await this.refresh();
    return [...this.cache.values()];
  }

  /** Endpoint records skipped at the last refresh because they do not parse. */
  async invalid(): Promise<InvalidRecord[]> {
    if (Date.now() - this.loadedAt > MAX_STALENESS_MS) await this.refresh();
    return this.skipped;
  }

  async resolve(model: string): Promise<Target> {
    if (!NAME_PATTERN.test(model)) {
      // Unknown, as OpenAI answers; the name itself is not echoed back, it may be anything.
      throw new PlatformError(404, "model_not_found", "The model does not exist: model names are 1-63 letters, digits, \".\", \"_\" or \"-\", starting with a letter or digit. GET /v1/models lists the models served here.", "model");
    }
    if (Date.now() - this.loadedAt > MAX_STALENESS_MS) await this.refresh();
    const endpoint = this.cache.get(model);
    if (!endpoint) {
      throw new PlatformError(404, "model_not_found", `The model \`${model}\` does not exist or you do not have access to it. GET /v1/models lists the models served here.`, "model");
    }
    const name = endpoint.config.model.name;
    return { endpoint, model: name, version: endpoint.version, bound: await this.bound(endpoint) };
  }

  private async bound(endpoint: EndpointRecord): Promise<PromptBound | undefined> {
    const key = `${endpoint.config.model.name}@${endpoint.version}\n${endpoint.config.runtime.max_model_len ?? ""}\n${endpoint.framework}`;
    if (this.bounds.has(key)) return this.bounds.get(key);
    // Without the model's record there is no bound here; the worker still checks exactly.
    const model = await resolveModelVersion(this.ctl, endpoint.config.model.name, endpoint.version).catch(() => undefined);
    const bound = promptBound(endpoint.framework, endpoint.config.runtime.max_model_len, model?.gguf);
    if (this.bounds.size > 1000) this.bounds.clear();
    if (model) this.bounds.set(key, bound);
    return bound;
  }

  private refresh(): Promise<void> {
    this.loading ??= (async () => {
      try {
        let read: Awaited<ReturnType<typeof readEndpoints>>;
        try {
          read = await withinRedisWait(readEndpoints(this.ctl), this.ctl.redis);
        } catch (e) {
          // Redis away: route on what is known (admission answers 503 next); knowing nothing, answer it here.
          if (this.loadedAt > 0) {
            this.loadedAt = Date.now(); // tried again after MAX_STALENESS_MS, not by every request meanwhile
            return;
          }
          throw withDetail(new PlatformError(503, "queue_unavailable", "the endpoint registry is unavailable, retry shortly", null, 1), e);
        }
        const { endpoints, invalid } = read;
        this.cache = new Map(endpoints.map((e) => [e.name, e]));
        this.skipped = invalid;
        this.loadedAt = Date.now();
      } finally {
        this.loading = undefined;
      }
    })();
    return this.loading;
  }

  async close(): Promise<void> {
    await this.subscriber?.quit().catch(() => undefined);
  }
}
