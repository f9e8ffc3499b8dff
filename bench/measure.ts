/**
 * What the benchmarks share: a lean keep-alive HTTP client (node:http, as a production caller
 * would use; fetch/undici adds a client-side cost that is not the platform's, see
 * docs/performance.md), the order statistics every figure is read with (kept in src/ because
 * `platform inference benchmark` reads its samples with the same ones), and the timing of a
 * series of calls, in alternating pairs where two sides are compared.
 */
import { Agent, request as httpRequest } from "node:http";

import { percentile } from "../src/benchmark/stats.ts";

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

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Half the range: the spread printed beside a median of per-round ratios. */
export const halfRange = (xs: number[]) => (xs.length === 0 ? 0 : (Math.max(...xs) - Math.min(...xs)) / 2);

export type Timed = { p50: number; p99: number; perSecond: number };
/** `elapsedMs`: the wall time the samples were taken in, for the rate. */
export function summarize(latencies: number[], elapsedMs: number): Timed {
  latencies.sort((a, b) => a - b);
  return {
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    perSecond: (latencies.length / elapsedMs) * 1000,
  };
}

/** `n` calls of `fn`, `concurrency` at a time. */
export async function timeEach(n: number, concurrency: number, fn: () => Promise<unknown>): Promise<Timed> {
  const latencies: number[] = [];
  const start = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next++ < n) {
        const t0 = performance.now();
        await fn();
        latencies.push(performance.now() - t0);
      }
    }),
  );
  return summarize(latencies, performance.now() - start);
}

export async function timeOne(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

/** Runs the pair in alternating order, so neither always runs on the warmer (or busier) side. */
export async function pair<A, B>(round: number, a: () => Promise<A>, b: () => Promise<B>): Promise<[A, B]> {
  if (round % 2 === 0) {
    const x = await a();
    return [x, await b()];
  }
  const y = await b();
  return [await a(), y];
}
