/**
 * The small pieces of src/telemetry/tracing-sdk.ts that keep tracing cheap on the request path:
 * the job's traceparent written and read without the propagator (as the W3C propagator would),
 * and ended spans handed to the batch processor after the turn that ended them.
 */
import { ROOT_CONTEXT, type SpanContext, TraceFlags, trace } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import type { ReadableSpan, SpanProcessor } from "@opentelemetry/sdk-trace";
import { describe, expect, it } from "vitest";
import { ExportAfterTurn, formatTraceparent, parentOf } from "../../src/telemetry/tracing-sdk.ts";

const w3c = new W3CTraceContextPropagator();
const viaPropagator = (traceparent: string) =>
  trace.getSpanContext(
    w3c.extract(
      ROOT_CONTEXT,
      { traceparent },
      { get: (c, k) => (c as Record<string, string>)[k], keys: (c) => Object.keys(c as object) },
    ),
  );

describe("the job's traceparent", () => {
  it("is written as the W3C propagator writes it, and nothing for an invalid or absent context", () => {
    const sc: SpanContext = {
      traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
      spanId: "00f067aa0ba902b7",
      traceFlags: TraceFlags.SAMPLED,
    };
    const carrier: Record<string, string> = {};
    w3c.inject(trace.setSpanContext(ROOT_CONTEXT, sc), carrier, {
      set: (c, k, v) => ((c as Record<string, string>)[k] = v),
    });
    expect(formatTraceparent(sc)).toBe(carrier.traceparent);
    expect(formatTraceparent({ ...sc, traceFlags: TraceFlags.NONE })).toBe(
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
    );
    expect(formatTraceparent({ ...sc, traceId: "0".repeat(32) })).toBeUndefined();
    expect(formatTraceparent(undefined)).toBeUndefined();
  });

  it("is read as the W3C propagator reads it: valid ones become the remote parent, the rest start a new trace", () => {
    for (const header of [
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
      "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future",
      " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 ",
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
      `00-${"0".repeat(32)}-00f067aa0ba902b7-01`,
      `00-4bf92f3577b34da6a3ce929d0e0e4736-${"0".repeat(16)}-01`,
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
      "garbage",
    ]) {
      expect(trace.getSpanContext(parentOf(header)), header).toEqual(viaPropagator(header));
    }
    expect(parentOf(undefined)).toBe(ROOT_CONTEXT);
  });
});

describe("ExportAfterTurn", () => {
  it("hands ended spans over on the next check phase, in order, and all of them before a flush or shutdown", async () => {
    const seen: string[] = [];
    const calls: string[] = [];
    const inner: SpanProcessor = {
      onStart: () => calls.push("start"),
      onEnd: (span) => seen.push(span.name),
      forceFlush: async () => void calls.push(`flush after ${seen.length}`),
      shutdown: async () => void calls.push(`shutdown after ${seen.length}`),
    };
    const processor = new ExportAfterTurn(inner);
    const span = (name: string) => ({ name }) as ReadableSpan;
    processor.onEnd(span("a"));
    processor.onEnd(span("b"));
    expect(seen).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(seen).toEqual(["a", "b"]);
    processor.onEnd(span("c"));
    await processor.forceFlush();
    processor.onEnd(span("d"));
    await processor.shutdown();
    expect(seen).toEqual(["a", "b", "c", "d"]);
    expect(calls).toEqual(["flush after 3", "shutdown after 4"]);
    // The immediate queued for "c" finds nothing left to hand over.
    await new Promise((r) => setImmediate(r));
    expect(seen).toHaveLength(4);
  });
});
