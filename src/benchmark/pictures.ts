/**
 * An image request of `platform inference benchmark` (docs/images.md, "Benchmark"): one
 * POST /v1/images/generations (b64_json, as the playground and most clients ask), timed end to end,
 * with the images and denoising steps its usage reports, so a level gives time per image and per step.
 */
import type { IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import { http } from "../process/node-http.ts";
import { agentFor, httpErrorText, type RequestSample, type RequestSpec } from "./measure.ts";

export function sendPicture(spec: RequestSpec, signal: AbortSignal): Promise<RequestSample> {
  const url = new URL(`${spec.baseUrl}/v1/images/generations`);
  const body = JSON.stringify({
    model: spec.model,
    prompt: spec.prompt,
    response_format: "b64_json",
    ...(spec.size !== undefined ? { size: spec.size } : {}),
    ...(spec.steps !== undefined ? { num_inference_steps: spec.steps } : {}),
  });
  const https = url.protocol === "https:";
  return new Promise((resolve, reject) => {
    const started = performance.now();
    let settled = false;
    const finish = (result: { usage?: ImagesUsage; error?: string }) => {
      if (settled) return;
      settled = true;
      signal.removeEventListener("abort", onAbort);
      const ok = result.error === undefined;
      resolve({
        ok,
        itl_ms: [],
        e2e_ms: performance.now() - started,
        output_tokens: 0,
        prompt_tokens: result.usage?.input_tokens ?? 0,
        tokens_exact: true,
        images: ok ? (result.usage?.images ?? 0) : 0,
        steps: ok ? (result.usage?.steps ?? 0) : 0,
        ...(result.error !== undefined ? { error: result.error } : {}),
      });
    };
    const onResponse = (res: IncomingMessage) => {
      res.setEncoding("utf8");
      let text = "";
      res.on("data", (chunk: string) => (text += chunk));
      res.on("error", (e) => finish({ error: e.message }));
      res.on("end", () => {
        if (res.statusCode !== 200) return finish({ error: httpErrorText(res.statusCode ?? 0, text) });
        try {
          finish({ usage: (JSON.parse(text) as { usage?: ImagesUsage }).usage });
        } catch {
          finish({ error: "an answer that is not JSON" });
        }
      });
    };
    const req = (https ? httpsRequest : http.request)(
      url,
      {
        method: "POST",
        agent: agentFor(https),
        headers: {
          authorization: `Bearer ${spec.apiKey}`,
          "content-type": "application/json",
          "content-length": Buffer.byteLength(body),
        },
      },
      onResponse,
    );
    const onAbort = () => {
      settled = true;
      req.destroy();
      reject(signal.reason ?? new Error("aborted"));
    };
    req.on("error", (e) =>
      finish({ error: `cannot reach the gateway (${(e as NodeJS.ErrnoException).code ?? e.message})` }),
    );
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    req.end(body);
  });
}

type ImagesUsage = { input_tokens?: number; images?: number; steps?: number };
