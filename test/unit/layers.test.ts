/**
 * Layers run one way (docs/design.md, "Layers"): a module imports its own folder and the layers
 * below it, never one beside or above it. LAYERS is the one list of them, bottom first; each
 * entry is a group of folders (or files) that do not import each other. Type-only imports count
 * too: a type that has to be imported from above belongs lower down.
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
  // Nouns, each owning its store, logic and metrics.
  ["src/registry", "src/replicas", "src/usage", "src/orgs", "src/protos"],
  ["src/ratelimit", "src/endpoints", "src/images", "src/image-files"],
  ["src/keys", "src/users", "src/autoscaling", "src/services"],
  ["src/queue", "src/tokens"],
  ["src/abtests", "src/signin"],
  ["src/batch"],
  // Evaluations read datasets as batch reads its inputs.
  ["src/evaluation"],
  ["src/finetuning"],
  // Roles. The CLI starts the others (`platform up`, `platform worker`), so it sits above them.
  ["src/gateway", "workers", "scaler"],
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

  it("finds the imports it checks (a pattern that matched nothing would pass anything)", () => {
    expect(importsOf("src/gateway/app.ts").length).toBeGreaterThan(10);
    expect(importsOf("src/cli/roles.ts").some((t) => t.startsWith("scaler/"))).toBe(true);
  });
});
