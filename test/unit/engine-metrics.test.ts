// An engine's own metrics served with a replica's (workers/engine-metrics.ts).
import { describe, expect, it } from "vitest";
import { relabelExposition } from "../../workers/engine-metrics.ts";
import { metricsText } from "../helpers/fake-vllm.ts";

const labels = { model_name: "chat", version: "v2", replica: "chat-1" };

describe("relabelExposition", () => {
  it("sets the replica's labels on every sample, replacing the engine's own values of them", () => {
    const out = relabelExposition(metricsText("served-name"), labels, new Set());
    expect(out).toContain('vllm:kv_cache_usage_perc{engine="0",model_name="chat",version="v2",replica="chat-1"} 0.25');
    expect(out).toContain(
      'vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="chat",version="v2",replica="chat-1"} 9.0',
    );
    expect(out).not.toContain("served-name");
    expect(out).toContain("# TYPE vllm:kv_cache_usage_perc gauge");
  });

  it("drops the families the replica exports itself, with their HELP, TYPE, series and creation times", () => {
    const out = relabelExposition(
      metricsText("m"),
      labels,
      new Set(["vllm:e2e_request_latency_seconds", "vllm:prompt_tokens_total"]),
    );
    expect(out).not.toMatch(/e2e_request_latency|prompt_tokens/);
    expect(out).toContain("vllm:num_preemptions_created{");
    expect(out).toContain("vllm:kv_cache_usage_perc{");
  });

  it("labels samples that had none, escapes values and skips what is not a sample", () => {
    const out = relabelExposition(
      '# a comment\nup 1\n\nweird line\nx{a="q\\"uote"} 2 1700000000\n',
      { replica: 'r"1' },
      new Set(),
    );
    expect(out).toBe('up{replica="r\\"1"} 1\nx{a="q\\"uote",replica="r\\"1"} 2 1700000000\n');
  });
});
