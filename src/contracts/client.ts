/**
 * What domain code that drives a running platform from outside (the benchmark, temporary endpoints,
 * evaluation's deployment) needs from its caller: the HTTP API, and a place to say how far it got.
 * The CLI's ApiClient and Progress are these; the domain code never imports the CLI.
 */

/** The platform's HTTP API as a signed-in client calls it. */
export type PlatformApi = {
  /** The gateway's origin, without /v1. */
  readonly baseUrl: string;
  /** Resolves the JSON answer; rejects with the server's error, its message ending in "(<code>)". */
  request<T>(method: string, path: string, body?: unknown): Promise<T>;
};

/** Whether `e` is the server's answer with this error code (as PlatformApi.request rejects). */
export function isApiError(e: unknown, code: string): e is Error {
  return e instanceof Error && e.message.endsWith(`(${code})`);
}

/** Where a long operation reports: lines that stay, and a passing status replaced by the next. */
export type Reporter = {
  line(text: string): void;
  status(text: string): void;
};
