/**
 * What `platform init` and `platform doctor` ask a platform URL before trusting it: is the URL a
 * platform gateway (and which version), and may these credentials see the organization. Each
 * answer is data with the problem named, so init can exit on it and doctor can print its fix.
 */
import type { Org } from "../../orgs/record.ts";
import type { ApiClient } from "../../client/api.ts";

const PROBE_TIMEOUT_MS = 5_000;

export type PlatformProbe =
  | { ok: true; version: string }
  | { ok: false; problem: "unreachable" | "not_a_platform"; message: string };

/** `GET <url>/healthz`: a platform gateway answers `{"status": "ok", "version"}`. */
export async function probePlatform(url: string, timeoutMs = PROBE_TIMEOUT_MS): Promise<PlatformProbe> {
  let res: Response;
  try {
    res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(timeoutMs) });
  } catch (e) {
    const error = e as Error & { cause?: { code?: string; message?: string } };
    const why =
      error.name === "TimeoutError"
        ? `no answer within ${timeoutMs / 1000} s`
        : (error.cause?.code ?? error.cause?.message ?? error.message);
    return { ok: false, problem: "unreachable", message: `cannot reach ${url} (${why})` };
  }
  const body = (await res.json().catch(() => undefined)) as { status?: unknown; version?: unknown } | undefined;
  if (res.ok && body?.status === "ok" && typeof body.version === "string") return { ok: true, version: body.version };
  return {
    ok: false,
    problem: "not_a_platform",
    message: `${url} is not a platform gateway: GET /healthz answered HTTP ${res.status}${res.ok ? " without the platform's version" : ""}`,
  };
}

export type OrgProbe =
  | { ok: true; org: Org }
  | { ok: false; problem: "not_found" | "not_allowed" | "refused"; message: string };

/** `GET /admin/v1/orgs/<id>` as `api`'s caller: another organization's is a 404, as one that does not exist. */
export async function probeOrg(api: ApiClient, orgId: string): Promise<OrgProbe> {
  const res = await api.send("GET", `/admin/v1/orgs/${encodeURIComponent(orgId)}`);
  const body = (await res.json().catch(() => ({}))) as Org & { error?: { message?: string; code?: string } };
  if (res.ok) return { ok: true, org: body };
  const reason = body.error ? ` (${body.error.code ?? body.error.message})` : "";
  if (res.status === 404)
    return {
      ok: false,
      problem: "not_found",
      message: `organization "${orgId}" not found at ${api.baseUrl}, or not yours: check the id (\`platform orgs list\` shows yours)`,
    };
  if (res.status === 401)
    return {
      ok: false,
      problem: "refused",
      message: `${api.baseUrl} refused the stored credentials${reason}: run \`platform auth login\``,
    };
  return {
    ok: false,
    problem: "not_allowed",
    message: `not allowed to read organization "${orgId}" at ${api.baseUrl}: HTTP ${res.status}${reason}`,
  };
}
