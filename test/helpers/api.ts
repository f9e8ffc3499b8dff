/**
 * Calling the platform's HTTP API as one key: a JSON body in, the status and parsed JSON body out.
 * The one authenticated fetch tests use (an empty body reads as `{}`, a non-JSON one as its text).
 */

export type Reply<T = Record<string, unknown>> = { status: number; body: T; headers: Headers };

export type Call = <T = Record<string, unknown>>(
  method: string,
  path: string,
  body?: unknown,
  headers?: Record<string, string>,
) => Promise<Reply<T>>;

/** A `call` bound to a base URL and a bearer key. */
export function api(baseUrl: string, key: string): Call {
  return async <T>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}) => {
    const res = await fetch(`${baseUrl}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${key}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
        ...headers,
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let parsed: unknown = {};
    try {
      parsed = text ? JSON.parse(text) : {};
    } catch {
      parsed = text;
    }
    return { status: res.status, body: parsed as T, headers: res.headers };
  };
}

/** The error code of an OpenAI-shaped error body. */
export const codeOf = (r: Reply<unknown>): string | undefined =>
  (r.body as { error?: { code?: string } } | undefined)?.error?.code;
