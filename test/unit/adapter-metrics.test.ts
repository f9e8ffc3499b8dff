/** A replica's LoRA adapter series (workers/metrics.ts): loaded now, and loads and evictions as counters. */
import { describe, expect, it } from "vitest";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import type { Endpoint } from "../../src/endpoints/record.ts";
import { WorkerMetrics } from "../../workers/metrics.ts";

const endpoint = {
  name: "tiny",
  version: "v1",
  framework: "llamacpp",
  config: DeploymentConfig.parse({ model: { name: "tiny" } }),
} as unknown as Endpoint;

describe("adapter metrics of a replica", () => {
  it("exports the engine's adapters loaded, loads and evictions, the counters following its totals", async () => {
    let stats = { loaded: 2, loads: 3, evictions: 1, names: ["a@v1", "b@v1"] };
    const m = new WorkerMetrics(
      endpoint,
      "tiny-1",
      () => ({ running: 0, waiting: 0 }),
      () => stats,
    );
    const sample = async (name: string) =>
      Number(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, "m").exec(await m.registry.metrics())?.[1]);
    expect(await sample("platform_adapters_loaded")).toBe(2);
    expect(await sample("platform_adapter_loads_total")).toBe(3);
    expect(await sample("platform_adapter_evictions_total")).toBe(1);
    stats = { loaded: 2, loads: 5, evictions: 3, names: ["a@v1", "c@v1"] };
    expect(await sample("platform_adapter_loads_total")).toBe(5);
    expect(await sample("platform_adapter_evictions_total")).toBe(3);
  });

  it("reports none for an engine without adapters", async () => {
    const m = new WorkerMetrics(endpoint, "tiny-1", () => ({ running: 0, waiting: 0 }));
    expect(await m.registry.metrics()).toMatch(/^platform_adapters_loaded\{[^}]*\} 0$/m);
  });
});
