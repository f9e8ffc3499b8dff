/**
 * Fetching a model from a remote source (https://, http:// when allowed, hf://).
 * The URL comes from a client, so every hop is checked: scheme, redirect target,
 * and the address actually connected to (checked inside the DNS lookup the
 * socket uses, so a name that re-resolves to an internal address between a
 * check and the connect cannot slip through). Size and time are bounded.
 */
import type { IncomingHttpHeaders, IncomingMessage, RequestOptions } from "node:http";
import { request as httpsRequest } from "node:https";
import { Transform } from "node:stream";
import { PlatformError } from "../contracts/errors.ts";
import { http } from "../process/node-http.ts";
import { DEFAULT_HF_ENDPOINT, type SourcePolicy } from "../settings/sources.ts";
import type { StorageError } from "../storage/index.ts";
import { guardedLookup, literalRefusal } from "../outbound/guard.ts";

export type SourceProgress = { received: number; total: number | null };

/** Schemes `--source` accepts, for error messages. */
export const SOURCE_SCHEMES =
  "https://, hf://, s3://, file:// or a path (http:// only with PLATFORM_SOURCES_ALLOW_HTTP=true)";

/** True for the sources this module fetches; the storage module handles file://, s3:// and paths. */
export function isRemoteSource(source: string): boolean {
  return /^(https?|hf):\/\//i.test(source);
}

/**
 * Refuse a scheme nobody handles (ftp:, gopher:, data:, ...) before anything
 * else looks at the source. A bare path (no `scheme:`) is left to storage.
 */
export function checkSourceScheme(source: string): void {
  const scheme = /^([a-z][a-z0-9+.-]+):/i.exec(source)?.[1]?.toLowerCase();
  if (scheme === undefined || ["https", "http", "hf", "s3", "file"].includes(scheme)) return;
  throw new PlatformError(
    400,
    "invalid_source",
    `source: the "${scheme}:" scheme is not supported; use ${SOURCE_SCHEMES}`,
    "source",
  );
}

/**
 * `hf://org/repo/path/file.gguf` (optionally `hf://org/repo@revision/...`) as a
 * download URL on `endpoint`, in huggingface_hub's form `<endpoint>/<org>/<repo>/resolve/<revision>/<file>`.
 * Each part is percent-encoded and `.`/`..` segments are refused, so the name
 * cannot step out of the repository's `resolve/` path on the endpoint (where the token goes).
 */
export function huggingFaceUrl(uri: string, endpoint: string = DEFAULT_HF_ENDPOINT): string {
  const m = uri.match(/^hf:\/\/([^/]+)\/([^/@]+)(?:@([^/]+))?\/(.+)$/);
  const segments = m ? [m[1]!, m[2]!, m[3] ?? "main", ...m[4]!.split("/")] : [];
  if (!m || segments.some((s) => s === "" || s === "." || s === "..")) {
    throw new PlatformError(400, "invalid_source", `${uri}: expected hf://<org>/<repo>[@<revision>]/<file>`, "source");
  }
  const [org, repo, revision, ...file] = segments.map(encodeURIComponent);
  return `${endpoint.replace(/\/+$/, "")}/${org}/${repo}/resolve/${revision}/${file.join("/")}`;
}

function forbidden(kind: string, hop: string): PlatformError {
  return new PlatformError(
    403,
    "source_forbidden",
    `source: ${hop} a ${kind} address, which model sources may not reach; an operator can allow it with PLATFORM_SOURCES_ALLOWED_HOSTS=<cidr,...> or PLATFORM_SOURCES_ALLOW_PRIVATE=true`,
    "source",
  );
}

/** The scheme and literal-address checks for one hop (the first URL or a redirect target). */
function checkHop(url: URL, policy: SourcePolicy, previous: URL | undefined): void {
  const hop = previous ? "a redirect goes to" : "the host is";
  if (url.protocol === "http:" && !policy.allowHttp) {
    const why = previous ? "a redirect goes to http://" : "http:// is refused";
    throw new PlatformError(
      400,
      "invalid_source",
      `source: ${why}; model sources must use https:// unless the operator sets PLATFORM_SOURCES_ALLOW_HTTP=true`,
      "source",
    );
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new PlatformError(
      400,
      "invalid_source",
      `source: ${previous ? `a redirect goes to a "${url.protocol}" URL, which is refused` : `the "${url.protocol}" scheme is not supported`}; sources are fetched over https:// only`,
      "source",
    );
  }
  if (url.username || url.password)
    throw new PlatformError(400, "invalid_source", "source: credentials in the URL are not accepted", "source");
  const kind = literalRefusal(url.hostname, policy);
  if (kind !== undefined) throw forbidden(kind, hop);
}

export type RemoteOptions = {
  /** The URL is on the Hub (HF_ENDPOINT): HF_TOKEN goes with requests to its origin. */
  hub?: boolean;
  /** Ask for the bytes from here on (HTTP Range); a server that ignores it answers 200 with all of them. */
  start?: number;
  onProgress?: (p: SourceProgress) => void;
  /** Bounds this response instead of policy.maxBytes (a directory's files share the budget). */
  maxBytes?: number;
  /** When the whole download must be done (epoch ms), for one that spans several requests; default: PLATFORM_SOURCES_TIMEOUT_MS from now. */
  deadline?: number;
};

export type RemoteResponse = {
  body: Transform;
  /** 206 when a range was asked for and given, else 200. */
  status: number;
  /** The response's Content-Length, when it said. */
  length: number | null;
  headers: IncomingHttpHeaders;
};

/** GET `start` (redirects followed and re-checked); the response's headers and its body, bounded as it streams. */
export async function openRemote(
  start: string,
  policy: SourcePolicy,
  options: RemoteOptions = {},
): Promise<RemoteResponse> {
  let url: URL;
  try {
    url = new URL(start);
  } catch {
    throw new PlatformError(400, "invalid_source", "source: not a valid URL", "source");
  }
  // Errors name the host the user (or HF_ENDPOINT) named, never an address it resolved to or redirected to.
  const named = url.host;
  const hubOrigin = options.hub ? new URL(policy.hfEndpoint).origin : undefined;
  const deadline = options.deadline ?? Date.now() + policy.totalTimeoutMs;
  let previous: URL | undefined;
  for (let hop = 0; ; hop++) {
    checkHop(url, policy, previous);
    if (Date.now() >= deadline) throw totalTimeout(policy);
    const headers: Record<string, string> = { "user-agent": "platform-model-import" };
    // The Hugging Face token goes to the Hub (HF_ENDPOINT's origin) only, never to the CDN it redirects to.
    if (hubOrigin !== undefined && policy.hfToken && url.origin === hubOrigin)
      headers.authorization = `Bearer ${policy.hfToken}`;
    if (options.start !== undefined && options.start > 0) headers.range = `bytes=${options.start}-`;
    const res = await get(
      url,
      headers,
      policy,
      deadline,
      previous ? "a redirect goes to" : "the host resolves to",
      named,
    );
    const status = res.statusCode ?? 0;
    if (status >= 300 && status < 400 && res.headers.location) {
      res.destroy();
      if (hop >= policy.maxRedirects)
        throw new PlatformError(
          502,
          "source_unreachable",
          `source: more than ${policy.maxRedirects} redirects`,
          "source",
        );
      previous = url;
      try {
        url = new URL(res.headers.location, url);
      } catch {
        throw new PlatformError(502, "source_unreachable", "source: the server sent an invalid redirect", "source");
      }
      continue;
    }
    if (status < 200 || status >= 300) {
      res.destroy();
      throw new PlatformError(
        status === 404 ? 404 : 502,
        "source_unreachable",
        `source: ${named} answered HTTP ${status}`,
        "source",
      );
    }
    const declared = Number(res.headers["content-length"]);
    const length =
      Number.isFinite(declared) && declared >= 0 && res.headers["content-length"] !== undefined ? declared : null;
    const base = status === 206 ? (options.start ?? 0) : 0;
    return {
      body: counted(res, policy, deadline, named, base, options.maxBytes ?? policy.maxBytes, options.onProgress),
      status,
      length,
      headers: res.headers,
    };
  }
}

function tooLarge(maxBytes: number): PlatformError {
  return new PlatformError(
    413,
    "source_too_large",
    `source: the artifact is larger than ${maxBytes} bytes (PLATFORM_MAX_MODEL_BYTES)`,
    "source",
  );
}

function totalTimeout(policy: SourcePolicy): PlatformError {
  return new PlatformError(
    504,
    "source_timeout",
    `source: the download did not finish within ${policy.totalTimeoutMs} ms (PLATFORM_SOURCES_TIMEOUT_MS)`,
    "source",
  );
}

function idleTimeout(policy: SourcePolicy): PlatformError {
  return new PlatformError(
    504,
    "source_timeout",
    `source: the server sent nothing for ${policy.idleTimeoutMs} ms (PLATFORM_SOURCES_IDLE_TIMEOUT_MS)`,
    "source",
  );
}

/** One request, no redirect following; the socket's lookup is the guarded one. */
function get(
  url: URL,
  headers: Record<string, string>,
  policy: SourcePolicy,
  deadline: number,
  hop: string,
  named: string,
): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const options: RequestOptions = {
      method: "GET",
      headers,
      agent: false,
      lookup: guardedLookup(policy, (kind) => forbidden(kind, hop)),
    };
    const send = url.protocol === "https:" ? httpsRequest : http.request;
    const req = send(url, options);
    const timer = setTimeout(() => req.destroy(totalTimeout(policy)), Math.max(0, deadline - Date.now()));
    req.setTimeout(policy.idleTimeoutMs, () => req.destroy(idleTimeout(policy)));
    req.on("error", (e) => {
      clearTimeout(timer);
      reject(e instanceof PlatformError ? e : unreachable(e, named));
    });
    req.on("response", (res) => {
      clearTimeout(timer);
      resolve(res);
    });
    req.end();
  });
}

/** Errors raised when a connection broke off mid-body: a download may resume these with a Range request. */
const brokenOff = new WeakSet<PlatformError>();

export function isBrokenOff(e: unknown): boolean {
  return e instanceof PlatformError && brokenOff.has(e);
}

function errorCode(e: unknown): string | undefined {
  const code = (e as { code?: unknown }).code;
  return typeof code === "string" && /^[A-Z_]+$/.test(code) ? code : undefined;
}

/**
 * Only the host as named and the error code reach the client: the error's own message could name
 * an internal address. A name that does not resolve is the usual sign of a machine offline.
 */
function unreachable(e: unknown, host: string): PlatformError {
  const code = errorCode(e);
  const hint =
    code === "ENOTFOUND" || code === "EAI_AGAIN"
      ? "; is this machine offline, or is the name wrong?"
      : "; check the network (and HF_ENDPOINT, for hf:// sources)";
  return new PlatformError(
    502,
    "source_unreachable",
    `source: could not reach ${host}${code ? ` (${code})` : ""}${hint}`,
    "source",
  );
}

/** The body, with the size limit, the deadline and the idle timeout enforced while it streams. */
function counted(
  res: IncomingMessage,
  policy: SourcePolicy,
  deadline: number,
  host: string,
  base: number,
  maxBytes: number,
  onProgress?: (p: SourceProgress) => void,
): Transform {
  const declared = Number(res.headers["content-length"]);
  const length =
    Number.isFinite(declared) && declared >= 0 && res.headers["content-length"] !== undefined ? declared : null;
  const total = length === null ? null : base + length;
  if (total !== null && total > maxBytes) {
    res.destroy();
    throw tooLarge(maxBytes);
  }
  let received = base;
  const out = new Transform({
    transform(chunk: Buffer, _enc, done) {
      received += chunk.length;
      if (received > maxBytes) return done(tooLarge(maxBytes));
      onProgress?.({ received, total });
      done(null, chunk);
    },
  });
  const timer = setTimeout(() => out.destroy(totalTimeout(policy)), Math.max(0, deadline - Date.now()));
  res.setTimeout(policy.idleTimeoutMs, () => out.destroy(idleTimeout(policy)));
  res.on("error", (e) => {
    if (e instanceof PlatformError) return out.destroy(e);
    const code = errorCode(e);
    const broken = new PlatformError(
      502,
      "source_unreachable",
      `source: the connection to ${host} broke off after ${received} bytes${code ? ` (${code})` : ""}`,
      "source",
    );
    brokenOff.add(broken);
    out.destroy(broken);
  });
  out.on("close", () => {
    clearTimeout(timer);
    res.destroy();
  });
  res.pipe(out);
  onProgress?.({ received, total });
  return out;
}

/**
 * A storage failure while reading a registration's source, as the client sees it: 404 for a
 * missing bucket, prefix or object (`what`), 502 for anything else, naming the source as written.
 */
export function sourceStorageError(e: StorageError, source: string, what: string): PlatformError {
  const missing = e.code === "not_found" || e.code === "no_such_bucket";
  return new PlatformError(
    missing ? 404 : 502,
    missing ? "source_not_found" : "source_unreadable",
    `source: "${source}": ${missing ? what : `cannot read it (${e.code})`}`,
    "source",
  );
}
