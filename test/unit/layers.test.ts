/**
 * Layers run one way (docs/design.md, "Layers"): a module imports its own folder and the layers
 * below it, never one beside or above it. LAYERS is the one list of them, bottom first; each
 * entry is a group of folders (or files) that do not import each other. Type-only imports count
 * too: a type that has to be imported from above belongs lower down. Three more rules: nothing
 * outside src/cli imports it, no import cycle ties two folders (at any depth) together, and no
 * import cycle ties two files together either, type-only imports included (a type two files
 * share lives in a third that both import, as src/batch/lines.ts does).
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");

const LAYERS: string[][] = [
  // Contracts: what crosses process and module boundaries (the queue job, names in Redis, the
  // OpenAI protocol, deployment documents, the one error type).
  ["src/contracts"],
  // Infrastructure: logs, traces and metric definitions; the process's own plumbing; Redis and
  // object storage; then settings, which read the environment into the shapes these declare.
  ["src/telemetry"],
  ["src/process"],
  ["src/redis", "src/storage"],
  ["src/settings"],
  // Requests to hosts a tenant names: the one guarded resolver (addresses, DNS pinned, no redirects followed).
  ["src/outbound"],
  // Model file formats (GGUF, conversion to it, quantization): file work the catalog and replicas use.
  ["src/formats"],
  // Nouns, each owning its store, logic and metrics.
  ["src/models", "src/replicas", "src/usage", "src/orgs", "src/protos", "src/responses", "src/files"],
  ["src/ratelimit", "src/endpoints", "src/container-images", "src/pictures"],
  ["src/keys", "src/users", "src/autoscaling", "src/services"],
  ["src/queue", "src/tokens", "src/registry-credentials"],
  ["src/abtests", "src/signin"],
  ["src/batch"],
  // Evaluations read datasets as batch reads its inputs.
  ["src/evaluation"],
  ["src/finetuning"],
  // The workspace's side: its .platformrc.json; the platform's API client and the credentials it
  // signs in with (which find the platform's URL in the workspace); then what commands build in a
  // workspace (service scaffolds, published images).
  ["src/workspace"],
  ["src/client"],
  ["src/scaffold", "src/publish"],
  // Roles. The CLI starts the others (`platform up`, `platform worker`), so it sits above them.
  ["src/gateway", "workers", "scaler"],
  // Clients of a running platform, as the CLI is: the benchmark drives endpoints through the HTTP API.
  ["src/benchmark"],
  ["src/cli"],
];

/** The folder (or top-level file) of LAYERS a path belongs to, and its layer's index. */
function unitOf(path: string): { unit: string; layer: number } | undefined {
  for (const [layer, units] of LAYERS.entries()) {
    for (const unit of units) if (path === unit || path.startsWith(`${unit}/`)) return { unit, layer };
  }
  return undefined;
}

function sources(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && /\.tsx?$/.test(e.name))
    .map((e) => relative(ROOT, join(e.parentPath, e.name)))
    .filter((f) => !f.startsWith("src/dashboard/"));
}

/** Every relative import of a file: static, re-exports and dynamic `import()`. */
function importsOf(file: string): string[] {
  const text = readFileSync(join(ROOT, file), "utf8");
  const specs = [
    ...text.matchAll(/(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+["'](\.[^"']+)["']/g),
    ...text.matchAll(/import\(\s*["'](\.[^"']+)["']\s*\)/g),
  ];
  return specs.map((m) => relative(ROOT, resolve(ROOT, dirname(file), m[1] as string)));
}

const FILES = ["src", "workers", "scaler"].flatMap(sources);

describe("layers", () => {
  it("every source file belongs to a layer", () => {
    expect(FILES.filter((f) => unitOf(f) === undefined)).toEqual([]);
  });

  it("imports run down the layers, never across or up", () => {
    const wrong: string[] = [];
    for (const file of FILES) {
      const from = unitOf(file);
      if (!from) continue;
      for (const target of importsOf(file)) {
        const to = unitOf(target);
        if (!to || to.unit === from.unit) continue;
        if (to.layer >= from.layer) wrong.push(`${file} -> ${target}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it("nothing outside src/cli imports it: the CLI parses, calls and prints; what others need lives lower", () => {
    // bench/ too: a benchmark script measures the platform's code, not the CLI's.
    const wrong = [...FILES, ...sources("bench")]
      .filter((f) => !f.startsWith("src/cli/"))
      .flatMap((file) =>
        importsOf(file)
          .filter((t) => t.startsWith("src/cli/"))
          .map((t) => `${file} -> ${t}`),
      );
    expect(wrong).toEqual([]);
  });

  it("no import cycle ties two folders together", () => {
    // The folder-level graph: an edge from each file's folder to each folder it imports from.
    const edges = new Map<string, Map<string, string>>();
    for (const file of FILES) {
      for (const target of importsOf(file)) {
        const from = dirname(file);
        const to = dirname(target);
        if (from === to) continue;
        const out = edges.get(from) ?? new Map<string, string>();
        if (!out.has(to)) out.set(to, `${file} -> ${target}`);
        edges.set(from, out);
      }
    }
    // A cycle is broken by moving what composes the subfolders into one of its own (src/gateway/server/,
    // scaler/start/) or what they share into one (src/cli/common/).
    expect(cyclesOf(edges).map((c) => c.name)).toEqual([]);
  });

  it("no import cycle ties two files together, at any depth", () => {
    // The file-level graph: a cycle means neither file can be read, tested or moved without the
    // other; the shared piece belongs in a file of its own that both import.
    const edges = new Map<string, Map<string, string>>();
    for (const file of FILES) {
      const out = new Map<string, string>();
      for (const target of importsOf(file)) out.set(target, `${file} -> ${target}`);
      edges.set(file, out);
    }
    expect(cyclesOf(edges).map((c) => c.name)).toEqual([]);
  });

  it("finds file-level cycles (a finder that found none would pass anything)", () => {
    const edges = new Map([
      ["a.ts", new Map([["b.ts", "a.ts -> b.ts"]])],
      ["b.ts", new Map([["c.ts", "b.ts -> c.ts"]])],
      ["c.ts", new Map([["a.ts", "c.ts -> a.ts"]])],
      ["d.ts", new Map([["a.ts", "d.ts -> a.ts"]])],
    ]);
    expect(cyclesOf(edges).map((c) => c.folders)).toEqual([["a.ts", "b.ts", "c.ts"]]);
  });

  it("finds the imports it checks (a pattern that matched nothing would pass anything)", () => {
    expect(importsOf("src/gateway/server/app.ts").length).toBeGreaterThan(10);
    expect(importsOf("src/cli/roles.ts").some((t) => t.startsWith("scaler/"))).toBe(true);
  });
});

/**
 * Each cycle of an import graph, of folders or of files (its strongly connected components of more
 * than one node, Tarjan's algorithm), named by the imports that close it.
 */
function cyclesOf(edges: Map<string, Map<string, string>>): { folders: string[]; name: string }[] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: { folders: string[]; name: string }[] = [];
  const visit = (v: string) => {
    index.set(v, index.size);
    low.set(v, index.get(v) as number);
    stack.push(v);
    onStack.add(v);
    for (const w of edges.get(v)?.keys() ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v) as number, index.get(w) as number));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop() as string;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length < 2) return;
    const inside = new Set(component);
    const closing = component.flatMap((a) =>
      [...(edges.get(a) ?? [])].filter(([b]) => inside.has(b)).map(([, e]) => e),
    );
    const folders = component.sort();
    cycles.push({ folders, name: `${folders.join(" <-> ")}: ${closing.sort().join("; ")}` });
  };
  for (const v of edges.keys()) if (!index.has(v)) visit(v);
  return cycles;
}
