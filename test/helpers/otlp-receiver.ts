/**
 * A local OTLP/HTTP trace receiver for tests and benches: accepts `POST /v1/traces` in either
 * encoding, keeps the spans of JSON bodies (OTEL_EXPORTER_OTLP_PROTOCOL=http/json: ids in hex,
 * as the OTLP/JSON mapping says) and counts the protobuf ones, and answers as a collector would.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export type ReceivedSpan = {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  /** OTLP's SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  startMs: number;
  endMs: number;
  status: { code?: number; message?: string };
  attributes: Record<string, unknown>;
  service: string;
};

export type OtlpReceiver = {
  /** Base URL for OTEL_EXPORTER_OTLP_ENDPOINT (the exporter appends /v1/traces). */
  url: string;
  spans: ReceivedSpan[];
  /** Export requests received, and their bytes, whatever the encoding. */
  requests: number;
  bytes: number;
  close: () => Promise<void>;
};

type AnyValue = {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
  arrayValue?: { values?: AnyValue[] };
};
type KeyValue = { key: string; value: AnyValue };

function anyValue(v: AnyValue): unknown {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.arrayValue) return (v.arrayValue.values ?? []).map(anyValue);
  return undefined;
}
const attributesOf = (kvs: KeyValue[] | undefined) =>
  Object.fromEntries((kvs ?? []).map((kv) => [kv.key, anyValue(kv.value)]));
const nanosToMs = (n: string | number) => Number(BigInt(n) / 1_000_000n);

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const receiver: Omit<OtlpReceiver, "url" | "close"> = { spans: [], requests: 0, bytes: 0 };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      receiver.requests++;
      receiver.bytes += body.length;
      const json = String(req.headers["content-type"] ?? "").includes("json");
      if (req.method === "POST" && req.url === "/v1/traces" && json)
        collect(receiver.spans, JSON.parse(body.toString("utf8")));
      // An empty ExportTraceServiceResponse, in the request's encoding: full success.
      res.writeHead(200, { "content-type": json ? "application/json" : "application/x-protobuf" });
      res.end(json ? "{}" : undefined);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return Object.assign(receiver, {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  });
}

type ExportRequest = {
  resourceSpans?: {
    resource?: { attributes?: KeyValue[] };
    scopeSpans?: {
      spans?: {
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        kind: number;
        startTimeUnixNano: string;
        endTimeUnixNano: string;
        status?: { code?: number; message?: string };
        attributes?: KeyValue[];
      }[];
    }[];
  }[];
};

function collect(into: ReceivedSpan[], body: ExportRequest): void {
  for (const rs of body.resourceSpans ?? []) {
    const service = String(attributesOf(rs.resource?.attributes)["service.name"] ?? "");
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        into.push({
          traceId: s.traceId,
          spanId: s.spanId,
          parentSpanId: s.parentSpanId ?? "",
          name: s.name,
          kind: s.kind,
          startMs: nanosToMs(s.startTimeUnixNano),
          endMs: nanosToMs(s.endTimeUnixNano),
          status: s.status ?? {},
          attributes: attributesOf(s.attributes),
          service,
        });
      }
    }
  }
}
