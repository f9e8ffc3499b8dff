/**
 * Which endpoint and version serve a request. Endpoint records are cached in
 * the gateway and refreshed on every change notice, so routing costs no Redis
 * round trip on the hot path.
 */
import type { Redis } from "ioredis";
import type { EndpointRecord } from "../contracts/records.ts";
import { listEndpoints } from "../control/endpoints.ts";
import { type Control, duplicate } from "../control/redis.ts";
import { PlatformError } from "../errors.ts";

export type Target = { endpoint: EndpointRecord; model: string; version: string };

const MAX_STALENESS_MS = 2000;

export class Router {
  private readonly ctl: Control;
  private cache = new Map<string, EndpointRecord>();
  private loadedAt = 0;
  private loading: Promise<void> | undefined;
  private subscriber: Redis | undefined;

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

  async resolve(model: string): Promise<Target> {
    if (Date.now() - this.loadedAt > MAX_STALENESS_MS) await this.refresh();
    const endpoint = this.cache.get(model);
    if (!endpoint) {
      throw new PlatformError(404, "model_not_found", `The model \`${model}\` does not exist or you do not have access to it. GET /v1/models lists the models served here.`, "model");
    }
    return { endpoint, model: endpoint.config.model.name, version: endpoint.version };
  }

  private refresh(): Promise<void> {
    this.loading ??= (async () => {
      try {
        const all = await listEndpoints(this.ctl);
        this.cache = new Map(all.map((e) => [e.name, e]));
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
