/**
 * The dashboard's only way to the platform: the gateway's own management API, with the key
 * the user typed (kept in sessionStorage, so it leaves with the tab) sent as a Bearer token.
 * Error answers keep the API's OpenAI-style message, which already says what to do.
 */

import type { AbTest as AbTestRecord, VariantStats } from "../abtests/record.ts";
import type { AutoscalingStatus, RecordedDecision } from "../autoscaling/decision.ts";
import type { BatchJob } from "../batch/record.ts";
import type { Endpoint, EndpointStatus as Status } from "../endpoints/record.ts";
import type { StoredResult } from "../evaluation/record.ts";
import type { ApiKey as StoredKey } from "../keys/record.ts";
import type { KeyLimits } from "../ratelimit/limits.ts";
import type { TokenRecord } from "../tokens/record.ts";

const KEY = "platform.dashboard.key";

export const session = {
  get: (): string | null => sessionStorage.getItem(KEY),
  set: (key: string) => sessionStorage.setItem(KEY, key),
  clear: () => {
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem("platform.dashboard.scope");
  },
};

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const key = session.get();
  const res = await fetch(path, {
    method,
    headers: {
      ...(key ? { authorization: `Bearer ${key}` } : {}),
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = text === "" ? undefined : JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  if (!res.ok) {
    const error = (parsed as { error?: { message?: string; code?: string } } | undefined)?.error;
    throw new ApiError(
      res.status,
      error?.code ?? String(res.status),
      error?.message ?? (text.slice(0, 300) || res.statusText),
    );
  }
  return parsed as T;
}

/**
 * The gateway's metrics as the key may read them (docs/observability.md, "The metrics port"): all
 * of them for an operator, its organization's series for anyone else; plain text.
 */
export async function scrapeMetrics(): Promise<string> {
  const key = session.get();
  const res = await fetch("/admin/v1/metrics", { headers: key ? { authorization: `Bearer ${key}` } : {} });
  if (!res.ok) throw new ApiError(res.status, String(res.status), `GET /admin/v1/metrics answered ${res.status}`);
  return res.text();
}

/**
 * Checks a key before keeping it, and says what it may see: an operator's key (an admin of the
 * install's own organization) gets the whole dashboard; any other key of an organization its
 * services and proto packages, which the management API serves to every member.
 */
export async function checkKey(key: string): Promise<Scope> {
  const res = await fetch("/admin/v1/whoami", { headers: { authorization: `Bearer ${key}` } });
  if (res.ok) {
    const who = (await res.json()) as { org: string; operator: boolean };
    return { operator: who.operator, org: who.org };
  }
  if (res.status === 401) throw new ApiError(401, "invalid_api_key", "That API key is not valid (unknown or revoked).");
  throw new ApiError(res.status, String(res.status), `The gateway answered ${res.status}; try again.`);
}

export type Scope = { operator: boolean; org: string };

const SCOPE = "platform.dashboard.scope";

/** What the signed-in key may see, kept beside it for this tab. */
export const scope = {
  get: (): Scope | null => {
    const raw = sessionStorage.getItem(SCOPE);
    return raw ? (JSON.parse(raw) as Scope) : null;
  },
  set: (s: Scope) => sessionStorage.setItem(SCOPE, JSON.stringify(s)),
};

// The API's shapes, from the modules that define them, as the CLI takes them. Type-only imports,
// erased from the bundle; each module reached imports only zod and modules like it, no server
// code (test/unit/dashboard-imports.test.ts).
/** GET /admin/v1/endpoints[/<name>]: the status with the stored deployment beside it. */
export type EndpointStatus = Status & { base_url: string; config: Endpoint["config"] };
/** One version of an A/B test (GET /admin/v1/endpoints/<name>/abtest; src/gateway/routes/admin-abtests.ts). */
export type Variant = {
  version: string;
  weight: number;
  deployment: string | null;
  state: string;
  replicas: Status["replicas"] | null;
  queue: Status["queue"] | null;
  stats: VariantStats;
  evaluations?: EvaluationResult[];
};
/** The latest result of a metric on a version (GET /admin/v1/evaluations/results; docs/evaluation.md). */
export type EvaluationResult = StoredResult;
export type EvaluatedTarget = { target: string; results: EvaluationResult[] };
export type AbTest = { endpoint: string; abtest: AbTestRecord | null; variants: Variant[] };
export type Decision = RecordedDecision;
export type Autoscaling = AutoscalingStatus;
/**
 * Written here: its module (src/models/record.ts) reads GGUF files (node:fs), which no browser
 * code may import, even as a type.
 */
export type ModelVersion = { name: string; version: string; framework: string; created: number };
export type Limits = KeyLimits;
/** `created`: seconds since the epoch; the API never shows the hash. */
export type ApiKey = Omit<StoredKey, "hash">;
/** A CLI session; times are epoch milliseconds. */
export type CliToken = TokenRecord;
export type { BatchJob };
