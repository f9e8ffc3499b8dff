/**
 * What the benchmarks share: a lean keep-alive HTTP client (node:http, as a production caller
 * would use; fetch/undici adds a client-side cost that is not the platform's, see
 * docs/performance.md) and the order statistics every figure is read with (kept in src/ because
 * `platform inference benchmark` reads its samples with the same ones).
 */
import { Agent, request as httpRequest } from "node:http";

export { median, percentile } from "../src/benchmark/stats.ts";

const agent = new Agent({ keepAlive: true, maxSockets: 64 });

/**
 * POSTs JSON and resolves with the parsed answer; a status of 300 or more rejects with the body.
 * A string body is sent as it is (JSON already written, so a load's requests cost its sender nothing).
 */
export async function postJson<T>(url: string, body: unknown, headers: Record<string, string> = {}): Promise<T> {
  return JSON.parse(await postText(url, body, headers)) as T;
}

/** The same, resolving with the answer's text as it came (a stream's events, all of them). */
export function postText(url: string, body: unknown, headers: Record<string, string> = {}): Promise<string> {
  const payload = typeof body === "string" ? body : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      url,
      {
        method: "POST",
        agent,
        headers: { ...headers, "content-type": "application/json", "content-length": Buffer.byteLength(payload) },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (text += chunk));
        res.on("end", () =>
          (res.statusCode ?? 500) < 300 ? resolve(text) : reject(new Error(`HTTP ${res.statusCode}: ${text}`)),
        );
      },
    );
    req.on("error", reject);
    req.end(payload);
  });
}
