/**
 * Endpoints a client deploys through the HTTP API for its own use and removes when it ends — at
 * the end, on failure, and on Ctrl-C (SIGINT) or SIGTERM: the benchmark's `--configs`
 * (`<model>--bench-…`) and the evaluation of a version no endpoint serves
 * (`<model>--eval-<version>`). A second signal exits at once, saying what is left behind.
 */
import { setTimeout as sleep } from "node:timers/promises";
import type { PlatformApi, Reporter } from "../contracts/client.ts";
import { isApiError } from "../contracts/client.ts";
import type { DeploymentConfig } from "../contracts/deployment.ts";
import type { EndpointStatus } from "./record.ts";

/** What `GET /admin/v1/endpoints/<name>` answers an admin. */
export type EndpointInfo = EndpointStatus & { base_url: string; config: DeploymentConfig };

/** Long enough for a vLLM replica to load a large model and capture its graphs. */
const READY_TIMEOUT_MS = 20 * 60_000;

/** `<model>--<kind>-<slug>`, the model's part shortened to fit the 63 characters a name may have. */
export function temporaryName(model: string, kind: string, slug: string): string {
  const suffix = `--${kind}-${slug}`;
  return `${model.slice(0, Math.max(1, 63 - suffix.length))}${suffix}`.slice(0, 63);
}

export class TemporaryEndpoints {
  private readonly api: PlatformApi;
  private readonly progress: Reporter;
  /** Who deploys them, for the message about a name already taken ("benchmark", "evaluation"). */
  private readonly purpose: string;
  private readonly deployed = new Set<string>();
  private readonly controller = new AbortController();
  private interrupted = false;
  private readonly onSignal = (signal: NodeJS.Signals) => {
    const names = [...this.deployed].join(", ");
    if (this.interrupted) {
      this.progress.line(`${signal} again: exiting without removing ${names || "anything"}`);
      process.exit(130);
    }
    this.interrupted = true;
    this.progress.line(`${signal}: stopping${names ? `, removing ${names}` : ""} (again to exit at once)`);
    this.controller.abort(this.interruption);
  };
  private readonly interruption: Error;

  /**
   * Takes over SIGINT and SIGTERM until `close()`: they abort `signal` with `interruption` (the
   * CLI's exits 130) so the command unwinds through its `finally`, which calls `close()`.
   */
  constructor(api: PlatformApi, progress: Reporter, options: { purpose: string; interruption: Error }) {
    this.api = api;
    this.progress = progress;
    this.purpose = options.purpose;
    this.interruption = options.interruption;
    process.on("SIGINT", this.onSignal);
    process.on("SIGTERM", this.onSignal);
  }

  /** Aborted on Ctrl-C / SIGTERM: pass it to whatever waits. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Deploys `config` under its `endpoint` name (which must be free) and waits until a replica serves. */
  async deploy(config: DeploymentConfig & { endpoint: string }, tag: string): Promise<EndpointInfo> {
    const name = config.endpoint;
    const path = `/admin/v1/endpoints/${encodeURIComponent(name)}`;
    const existing = await this.api.request<EndpointInfo>("GET", path).then(
      (s) => s,
      () => undefined,
    );
    if (existing) {
      throw new Error(
        `an endpoint named ${name} exists already (another ${this.purpose} running, or one that was killed left it); remove it with \`curl -X DELETE -H "Authorization: Bearer $KEY" ${this.api.baseUrl}${path}\` and run again`,
      );
    }
    // Before the PUT: a signal during it still removes what it may have created.
    this.deployed.add(name);
    await this.api.request("PUT", path, config);
    this.progress.line(
      `${tag ? `${tag} ` : ""}deployed ${name} (${config.model.name}@${config.model.version}, ${config.resources.replicas} replica(s))`,
    );
    return waitAvailable(this.api, name, this.progress, tag, this.signal);
  }

  /** Removes one now (a no-op for a name it did not deploy). */
  async remove(name: string, tag = ""): Promise<void> {
    if (!this.deployed.has(name)) return;
    try {
      await this.api.request("DELETE", `/admin/v1/endpoints/${encodeURIComponent(name)}`);
      this.deployed.delete(name);
      this.progress.line(`${tag ? `${tag} ` : ""}removed ${name}`);
    } catch (e) {
      const message = e instanceof Error ? e.message : String(e);
      // Never deployed (the PUT failed): nothing to remove.
      if (isApiError(e, "model_not_found")) {
        this.deployed.delete(name);
        return;
      }
      this.progress.line(`could not remove ${name}: ${message}; remove it with DELETE /admin/v1/endpoints/${name}`);
    }
  }

  /** Removes every one still deployed and gives the signals back. */
  async close(): Promise<void> {
    try {
      for (const name of [...this.deployed]) await this.remove(name);
    } finally {
      process.off("SIGINT", this.onSignal);
      process.off("SIGTERM", this.onSignal);
    }
  }
}

/** Polls until a replica serves: measuring or evaluating a starting endpoint would wait on its start-up. */
export async function waitAvailable(
  api: PlatformApi,
  name: string,
  progress: Reporter,
  tag: string,
  signal: AbortSignal,
): Promise<EndpointInfo> {
  const path = `/admin/v1/endpoints/${encodeURIComponent(name)}`;
  const t0 = Date.now();
  for (;;) {
    const status = await api.request<EndpointInfo>("GET", path);
    if (status.state === "available") return status;
    if (status.state === "failed")
      throw new Error(`${name} failed to start: ${status.errors.join("; ") || "no replica became ready"}`);
    if (Date.now() - t0 > READY_TIMEOUT_MS)
      throw new Error(`${name} was not available after ${READY_TIMEOUT_MS / 60_000} minutes (${status.state})`);
    progress.status(
      `${tag ? `${tag} ` : ""}waiting for ${name}: ${status.state}, ${status.replicas.ready}/${status.replicas.desired} ready, ${Math.round((Date.now() - t0) / 1000)} s`,
    );
    await sleep(1_000, undefined, { signal });
  }
}
