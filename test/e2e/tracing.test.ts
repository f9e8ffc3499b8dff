/**
 * Tracing and structured logs end to end, through `platform up` on the suite's tiny model:
 * with OTLP export on (to a receiver in this test, OTLP/HTTP JSON) one request is one trace —
 * the gateway's server span, the queue wait and the worker's inference span, parented right —
 * and a caller's traceparent is honoured; its log lines are JSON with its request and trace
 * ids. With tracing off, no process of the stack loads the OpenTelemetry SDK at all.
 */
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tinyModelPath } from "../helpers/models.ts";
import { type OtlpReceiver, type ReceivedSpan, startOtlpReceiver } from "../helpers/otlp-receiver.ts";
import { type OwnStack, startStack } from "../helpers/stack.ts";

const MODULE_LOG = fileURLToPath(new URL("../helpers/module-log.ts", import.meta.url));
const SERVER = 2;
const CONSUMER = 5;

/** The OpenTelemetry packages each Node process of a stack resolved, by its command line. */
async function modulesByProcess(dir: string): Promise<Map<string, string[]>> {
  const out = new Map<string, string[]>();
  for (const f of await readdir(dir)) {
    const [head = "", ...mods] = (await readFile(join(dir, f), "utf8")).split("\n").filter(Boolean);
    out.set(`${f}: ${head}`, mods);
  }
  return out;
}

/** The lines of a log read while it is being written: a last line without its newline is not complete yet. */
function completeLines(text: string): string[] {
  const lines = text.split("\n");
  lines.pop();
  return lines;
}

async function post(
  stack: OwnStack,
  path: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<Response> {
  return fetch(`${stack.baseUrl}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
}

describe("tracing on: OTLP export to a local receiver", () => {
  let receiver: OtlpReceiver;
  let stack: OwnStack;
  let modules: string;

  beforeAll(async () => {
    receiver = await startOtlpReceiver();
    modules = await mkdtemp(join(tmpdir(), "platform-modules-"));
    stack = await startStack({
      model: await tinyModelPath(),
      args: ["--name", "tiny"],
      env: {
        OTEL_TRACES_EXPORTER: "otlp",
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
        // Export within a tenth of a second rather than the default five.
        OTEL_BSP_SCHEDULE_DELAY: "100",
        PLATFORM_LOG_FORMAT: "json",
        PLATFORM_LOG_LEVEL: "debug",
        NODE_OPTIONS: `--import ${MODULE_LOG}`,
        MODULE_LOG_DIR: modules,
      },
    });
  });

  afterAll(async () => {
    expect(await stack?.stop()).toBe(0);
    await receiver?.close();
    if (modules) await rm(modules, { recursive: true, force: true });
  });

  /** The spans of one request (by its id) once the gateway's and the worker's have all arrived. */
  async function spansOf(
    requestId: string,
  ): Promise<{ server: ReceivedSpan; wait: ReceivedSpan; inference: ReceivedSpan }> {
    const find = () => {
      const mine = receiver.spans.filter((s) => s.attributes["platform.request_id"] === requestId);
      return {
        server: mine.find((s) => s.kind === SERVER),
        wait: mine.find((s) => s.name === "queue wait"),
        inference: mine.find((s) => s.kind === CONSUMER),
      };
    };
    await stack.waitFor(async () => Object.values(find()).every(Boolean), `the spans of ${requestId}`, 15_000);
    return find() as { server: ReceivedSpan; wait: ReceivedSpan; inference: ReceivedSpan };
  }

  it("one request is one trace: the gateway's server span, then the queue wait and the inference in the worker", async () => {
    const res = await post(
      stack,
      "/v1/completions",
      { model: "tiny", prompt: "Once upon a time", max_tokens: 4 },
      { "x-request-id": "req_trace_plain" },
    );
    expect(res.status).toBe(200);
    const { server, wait, inference } = await spansOf("req_trace_plain");

    expect(server.name).toBe("POST /v1/completions");
    expect(server.service).toBe("platform-gateway");
    expect(server.parentSpanId).toBe(""); // no traceparent came in: a root
    expect(server.attributes).toMatchObject({
      "http.request.method": "POST",
      "http.route": "/v1/completions",
      "http.response.status_code": 200,
      "platform.model.version": "v1",
    });

    for (const span of [wait, inference]) {
      expect(span.service).toBe("platform-worker");
      expect(span.traceId).toBe(server.traceId);
      expect(span.parentSpanId).toBe(server.spanId);
    }
    expect(inference.name).toBe("text_completion tiny");
    expect(inference.attributes).toMatchObject({
      "gen_ai.request.model": "tiny",
      "gen_ai.usage.output_tokens": 4,
      "gen_ai.request.max_tokens": 4,
      "platform.model.version": "v1",
      "messaging.system": "bullmq",
    });
    // In order, inside the request: waited, then ran, then answered. (Two processes, two clocks
    // read a few ms apart: a little slack across them; none within the worker.)
    expect(wait.startMs).toBeGreaterThanOrEqual(server.startMs - 20);
    expect(wait.endMs).toBeLessThanOrEqual(inference.startMs);
    expect(inference.endMs).toBeLessThanOrEqual(server.endMs + 20);
  });

  it("honours an incoming W3C traceparent: the request joins the caller's trace", async () => {
    const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
    const callerSpan = "00f067aa0ba902b7";
    const res = await post(
      stack,
      "/v1/chat/completions",
      { model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 3 },
      {
        "x-request-id": "req_trace_joined",
        traceparent: `00-${traceId}-${callerSpan}-01`,
      },
    );
    expect(res.status).toBe(200);
    const { server, wait, inference } = await spansOf("req_trace_joined");
    expect(server.traceId).toBe(traceId);
    expect(server.parentSpanId).toBe(callerSpan);
    expect(server.name).toBe("POST /v1/chat/completions");
    expect([wait.traceId, inference.traceId]).toEqual([traceId, traceId]);
    expect(inference.parentSpanId).toBe(server.spanId);
    expect(inference.name).toBe("chat tiny");
  });

  it("a streamed answer's server span lasts until the stream ends", async () => {
    const res = await post(
      stack,
      "/v1/completions",
      { model: "tiny", prompt: "The little dog", max_tokens: 64, stream: true },
      { "x-request-id": "req_trace_stream" },
    );
    expect(res.status).toBe(200);
    expect(await res.text()).toContain("[DONE]");
    const { server, inference } = await spansOf("req_trace_stream");
    expect(inference.traceId).toBe(server.traceId);
    // The handler returned at the first token; the span waited for the last one to be sent, which
    // the gateway can only do after the worker finished (the SDK anchors both clocks to the wall clock).
    expect(server.endMs).toBeGreaterThanOrEqual(inference.endMs - 2);
  });

  it("a caller's unsampled trace is not recorded anywhere, and no trace is made for it", async () => {
    const before = receiver.spans.length;
    const res = await post(
      stack,
      "/v1/completions",
      { model: "tiny", prompt: "hi", max_tokens: 2 },
      { "x-request-id": "req_trace_unsampled", traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00" },
    );
    expect(res.status).toBe(200);
    // A sampled request after it: once its spans from the gateway and the worker have arrived, any
    // span of the unsampled one (ended earlier, in the same processes) would have arrived too.
    const after = await post(
      stack,
      "/v1/completions",
      { model: "tiny", prompt: "hi", max_tokens: 2 },
      {
        "x-request-id": "req_trace_after_unsampled",
      },
    );
    expect(after.status).toBe(200);
    await spansOf("req_trace_after_unsampled");
    expect(
      receiver.spans.slice(before).filter((s) => s.attributes["platform.request_id"] === "req_trace_unsampled"),
    ).toEqual([]);
  });

  it("logs are JSON lines with the request id and the trace id, in the gateway and in the worker", async () => {
    const res = await post(
      stack,
      "/v1/completions",
      { model: "tiny", prompt: "Once", max_tokens: 2 },
      { "x-request-id": "req_trace_logs" },
    );
    expect(res.status).toBe(200);
    const { server } = await spansOf("req_trace_logs");
    const gatewayLine = async () => completeLines(stack.output()).find((l) => l.includes('"req_trace_logs"'));
    await stack.waitFor(async () => (await gatewayLine()) !== undefined, "the gateway's request line");
    const gateway = JSON.parse((await gatewayLine()) as string) as Record<string, unknown>;
    expect(gateway).toMatchObject({
      level: "debug",
      role: "up",
      component: "gateway",
      msg: "request",
      request_id: "req_trace_logs",
      trace_id: server.traceId,
      method: "POST",
      path: "/v1/completions",
      status: 200,
    });
    expect(typeof gateway.time).toBe("string");

    // The worker writes to its replica's log file under the data directory.
    const workerLines = async () => {
      const dir = join(stack.dataDir, "logs");
      const texts = await Promise.all((await readdir(dir)).map((f) => readFile(join(dir, f), "utf8")));
      return texts.flatMap(completeLines).filter((l) => l.includes("req_trace_logs"));
    };
    await stack.waitFor(async () => (await workerLines()).length > 0, "the worker's job line");
    for (const line of await workerLines()) {
      const parsed = JSON.parse(line) as Record<string, unknown>;
      expect(parsed).toMatchObject({ role: "worker", request_id: "req_trace_logs", trace_id: server.traceId });
      expect(parsed.level).toBeTypeOf("string");
    }
  });

  it("both the gateway and the worker loaded the SDK (the module log sees it)", async () => {
    const byProcess = await modulesByProcess(modules);
    const exporting = [...byProcess].filter(
      ([, mods]) =>
        mods.includes("@opentelemetry/sdk-trace") && mods.includes("@opentelemetry/exporter-trace-otlp-http"),
    );
    // `up` and the replica (a standby worker started meanwhile may still be loading).
    expect(exporting.map(([command]) => command).join("\n")).toMatch(
      /platform\.js up[\s\S]*platform\.js worker|platform\.js worker[\s\S]*platform\.js up/,
    );
    // Only the protocol's exporter: http/json here, so not the protobuf one.
    for (const [, mods] of byProcess) expect(mods).not.toContain("@opentelemetry/exporter-trace-otlp-proto");
  });
});

describe("tracing off (the default)", () => {
  let stack: OwnStack;
  let modules: string;

  beforeAll(async () => {
    modules = await mkdtemp(join(tmpdir(), "platform-modules-"));
    stack = await startStack({
      model: await tinyModelPath(),
      args: ["--name", "tiny"],
      env: {
        NODE_OPTIONS: `--import ${MODULE_LOG}`,
        MODULE_LOG_DIR: modules,
        OTEL_TRACES_EXPORTER: undefined,
        OTEL_SDK_DISABLED: undefined,
      },
    });
  });

  afterAll(async () => {
    expect(await stack?.stop()).toBe(0);
    if (modules) await rm(modules, { recursive: true, force: true });
  });

  it("serves requests without loading any part of the OpenTelemetry SDK in any process", async () => {
    const res = await post(
      stack,
      "/v1/completions",
      { model: "tiny", prompt: "Once upon a time", max_tokens: 4 },
      { traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" },
    );
    expect(res.status).toBe(200);
    const byProcess = await modulesByProcess(modules);
    const commands = [...byProcess.keys()].join("\n");
    expect(commands).toMatch(/platform\.js up/);
    expect(commands).toMatch(/platform\.js worker/);
    // At most @opentelemetry/api, the no-op API (prom-client requires it for exemplars): no SDK,
    // no exporter, no context manager.
    for (const [command, mods] of byProcess)
      expect(
        mods.filter((m) => m !== "@opentelemetry/api"),
        command,
      ).toEqual([]);
    // The text logs of `up` stay as they were: no JSON.
    await stack.waitFor(
      async () => /\[endpoint\] tiny: available/.test(stack.output()),
      "up's text line for the endpoint",
    );
    expect(stack.output()).not.toMatch(/^\{"level"/m);
  });
});
