/**
 * One meaning per name (docs/layout.md, "Words"): a value (function, const, class) exported under
 * the same name from two files of src/, workers/ or scaler/ is either a deliberate per-noun
 * interface, listed in SHARED with why, or a clash to rename. At most 10 such names.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");

/** Names several files export on purpose: the same operation on each noun (or protocol) that has it. */
const SHARED: Record<string, string> = {
  // The job stores of batch, evaluation and fine-tuning (src/<noun>/store.ts) answer alike;
  // updateIfActive also has the generic form they wrap (src/redis/stored.ts).
  listIds: "a job store's ids, newest first",
  isFinal: "whether a job's status is final",
  readRecord: "a job store's record by id",
  createRecord: "a job store's new record",
  updateIfActive: "a job record changed only while the job is active",
  // The Anthropic Messages and OpenAI Responses adapters onto chat completions (src/contracts/).
  toChatMessages: "a protocol's input as chat messages",
  toChatTools: "a protocol's tools as chat tools",
  toChatToolChoice: "a protocol's tool choice as chat's",
  toParams: "a protocol's request as the job's sampling parameters",
  // The service scaffolds, one module per language (src/scaffold/).
  exampleShape: "a scaffold's example value for a proto message",
};

function sources(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && /\.tsx?$/.test(e.name))
    .map((e) => relative(ROOT, join(e.parentPath, e.name)));
}

/** Exported value names → the files that export them. */
function exportedValues(): Map<string, string[]> {
  const byName = new Map<string, string[]>();
  for (const file of ["src", "workers", "scaler"].flatMap(sources)) {
    const text = readFileSync(join(ROOT, file), "utf8");
    const names = new Set(
      [...text.matchAll(/^export\s+(?:async\s+)?(?:function\*?|const|let|class)\s+([A-Za-z_$][\w$]*)/gm)].map(
        (m) => m[1] as string,
      ),
    );
    for (const name of names) byName.set(name, [...(byName.get(name) ?? []), file]);
  }
  return byName;
}

describe("exported names", () => {
  const exported = exportedValues();
  const shared = [...exported].filter(([, files]) => files.length > 1);

  it("finds the exports it counts", () => {
    // A pattern that matched nothing would pass the tests below without checking anything.
    expect(exported.size).toBeGreaterThan(500);
  });

  it("a name exported from two or more files is a listed per-noun interface", () => {
    const clashes = shared.filter(([name]) => !(name in SHARED)).map(([name, files]) => `${name}: ${files.join(", ")}`);
    expect(clashes).toEqual([]);
  });

  it("at most 10 such names, and none listed that is no longer shared", () => {
    expect(Object.keys(SHARED).length).toBeLessThanOrEqual(10);
    const names = new Set(shared.map(([name]) => name));
    expect(Object.keys(SHARED).filter((name) => !names.has(name))).toEqual([]);
  });
});
