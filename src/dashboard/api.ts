/**
 * The dashboard's only way to the platform: the gateway's own management API, with the key
 * the user typed (kept in sessionStorage, so it leaves with the tab) sent as a Bearer token.
 * Error answers keep the API's OpenAI-style message, which already says what to do.
 */

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

// The API's shapes, as far as the dashboard reads them (src/endpoints/status.ts, src/contracts/*).
export type EndpointStatus = {
  endpoint: string;
  state: string;
  model: string;
  version: string;
  requested_version: string;
  /** The engine serving it (the deployment's `model.framework`, or its version's when the deployment names none). */
  framework?: string;
  replicas: { desired: number; ready: number; starting: number; draining: number; failed: number };
  queue: { waiting: number; active: number };
  errors: string[];
  variant_of?: string;
  config: {
    model: { name: string; version: string; framework?: string };
    runtime: Record<string, unknown>;
    resources: Record<string, unknown> & { replicas: number };
  };
};
export type Variant = {
  version: string;
  weight: number;
  deployment: string | null;
  state: string;
  replicas: { ready: number; desired: number } | null;
  stats?: { requests: number; errors: number };
  evaluations?: EvaluationResult[];
};
/** The latest result of a metric on a version (GET /admin/v1/evaluations/results; docs/evaluation.md). */
export type EvaluationResult = {
  metric: string;
  value: number;
  n: number;
  stderr: number | null;
  adapter: string | null;
  dataset: string;
  job_id: string;
  finished: number;
};
export type EvaluatedTarget = { target: string; results: EvaluationResult[] };
export type AbTest = {
  endpoint: string;
  abtest: { state: string; split: { version: string; weight: number }[]; sticky?: string; keep?: string } | null;
  variants: Variant[];
};
export type Decision = { at: number; action: string; from: number; to: number; reason: string };
export type Autoscaling = {
  endpoint: string;
  configured: boolean;
  enabled: boolean;
  config: { enabled: boolean; min_replicas: number; max_replicas: number; target_queue_depth: number } | null;
  decisions: Decision[];
};
export type ModelVersion = { name: string; version: string; framework: string; created: number };
export type Limits = {
  rpm?: number;
  tpm?: number;
  max_concurrency?: number;
  models?: Record<string, { rpm?: number; tpm?: number; max_concurrency?: number }>;
};
/** `created`: seconds since the epoch. */
export type ApiKey = { id: string; name: string; role: string; prefix: string; created: number; limits?: Limits };
/** A CLI session (src/tokens/record.ts); times are epoch milliseconds. */
export type CliToken = {
  id: string;
  subject: { kind: "key" | "user"; id: string };
  name: string;
  org: string;
  role: string;
  created: number;
  expires: number;
  refresh_expires: number;
};
export type BatchJob = {
  id: string;
  model: string;
  version: string;
  state: string;
  counts: { total: number; succeeded: number; failed: number; in_flight: number };
  created: number;
  error: { message: string } | null;
};
