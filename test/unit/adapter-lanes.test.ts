/**
 * The llama.cpp adapter contexts' bound (workers/engines/llamacpp-adapters.ts) with stand-in contexts:
 * least recently used out, never a context with a request in flight, a request waiting for one to fall idle.
 */
import type { LlamaContext, LlamaModel } from "node-llama-cpp";
import { describe, expect, it } from "vitest";
import { AdapterLanes } from "../../workers/engines/llamacpp-adapters.ts";

function lanes(max: number) {
  const disposed: string[] = [];
  const made: string[] = [];
  const model = { _loraAdapters: new Map() } as unknown as LlamaModel;
  const l = new AdapterLanes(
    model,
    async (path) => {
      made.push(path);
      return {
        totalSequences: 2,
        getSequence: () => ({ path }),
        dispose: async () => void disposed.push(path),
      } as unknown as LlamaContext;
    },
    max,
  );
  return { l, disposed, made };
}

describe("adapter contexts", () => {
  it("makes one context per adapter, shared by its requests", async () => {
    const { l, made } = lanes(2);
    const a = await l.take("a@v1", "/a", []);
    const b = await l.take("a@v1", "/a", []);
    expect(made).toEqual(["/a"]);
    expect(a.lane).toBe(b.lane);
    l.release(a.lane, a.taken.sequence);
    l.release(b.lane, b.taken.sequence);
  });

  it("evicts the least recently used idle context to make room", async () => {
    const { l, disposed } = lanes(2);
    for (const ref of ["a", "b", "a"]) {
      const t = await l.take(`${ref}@v1`, `/${ref}`, []);
      l.release(t.lane, t.taken.sequence);
    }
    const c = await l.take("c@v1", "/c", []);
    l.release(c.lane, c.taken.sequence);
    expect(disposed).toEqual(["/b"]);
    expect(l.loaded()).toEqual(["a@v1", "c@v1"]);
  });

  it("never evicts a context with a request in flight: a new adapter waits until one falls idle", async () => {
    const { l, disposed } = lanes(1);
    const a = await l.take("a@v1", "/a", []);
    let got = false;
    const b = l.take("b@v1", "/b", []).then((t) => {
      got = true;
      return t;
    });
    // Every pending turn of the event loop passes; the request is still waiting.
    for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
    expect(got).toBe(false);
    expect(disposed).toEqual([]);
    l.release(a.lane, a.taken.sequence);
    const taken = await b;
    expect(disposed).toEqual(["/a"]);
    expect(l.loaded()).toEqual(["b@v1"]);
    expect(l.stats()).toEqual({ loaded: 1, loads: 2, evictions: 1, names: ["b@v1"] });
    l.release(taken.lane, taken.taken.sequence);
  });
});
