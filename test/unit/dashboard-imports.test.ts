/**
 * The dashboard is browser code (src/dashboard/, bundled by scripts/build-dashboard.mjs) that
 * takes the API's shapes from the modules that define them, as the CLI does. Two rules keep server
 * code out of it: it imports those modules as types only (erased from the bundle), and every
 * module such an import reaches imports only zod and modules like it, so the dashboard's
 * typecheck (tsconfig.dashboard.json, no Node types) never sees Node or a server package.
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");
const DASHBOARD = "src/dashboard";
/** Packages a module reached from the dashboard may import. */
const BROWSER_SAFE = new Set(["zod"]);

type Import = { spec: string; typeOnly: boolean };

function importsOf(file: string): Import[] {
  const text = readFileSync(join(ROOT, file), "utf8");
  return [...text.matchAll(/(?:^|\n)\s*(import|export)(\s+type)?\s[^;]*?from\s+["']([^"']+)["']/g)].map((m) => ({
    spec: m[3] as string,
    typeOnly: m[2] !== undefined,
  }));
}

const resolved = (file: string, spec: string) => relative(ROOT, resolve(ROOT, dirname(file), spec));

const dashboardFiles = readdirSync(join(ROOT, DASHBOARD))
  .filter((f) => /\.tsx?$/.test(f))
  .map((f) => `${DASHBOARD}/${f}`);

/** The modules outside the dashboard that it imports, each with the dashboard file that does. */
const serverImports = dashboardFiles.flatMap((file) =>
  importsOf(file)
    .filter((i) => i.spec.startsWith(".") && !resolved(file, i.spec).startsWith(`${DASHBOARD}/`))
    .map((i) => ({ file, target: resolved(file, i.spec), typeOnly: i.typeOnly })),
);

describe("the dashboard's imports", () => {
  it("takes the API's types from their modules (a pattern that matched nothing would pass anything)", () => {
    expect(serverImports.map((i) => i.target)).toContain("src/autoscaling/decision.ts");
  });

  it("imports modules outside src/dashboard as types only", () => {
    expect(serverImports.filter((i) => !i.typeOnly).map((i) => `${i.file} -> ${i.target}`)).toEqual([]);
  });

  it("reaches only modules that import zod and modules like them: no Node, no server package", () => {
    const wrong: string[] = [];
    const seen = new Set<string>();
    const visit = (file: string, via: string) => {
      if (seen.has(file)) return;
      seen.add(file);
      for (const { spec } of importsOf(file)) {
        if (spec.startsWith(".")) visit(resolved(file, spec), `${via} -> ${file}`);
        else if (!BROWSER_SAFE.has(spec)) wrong.push(`${via} -> ${file} imports ${spec}`);
      }
    };
    for (const i of serverImports) visit(i.target, i.file);
    expect(wrong).toEqual([]);
  });
});
