/**
 * Each role loads only the libraries it uses (docs/performance.md, "RSS"): a worker no Kubernetes
 * client, AWS SDK or undici; a gateway and the scaler no llama.cpp. Checked on the real module
 * graphs, in a fresh Node process per role, with a resolve hook that sees `import` and `require`.
 */
import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";

/** The packages a fresh process resolves while importing `entry`, and whether Node's undici was loaded. */
function loadedBy(entry: string): { packages: string[]; undici: boolean } {
  const script = `
    import { registerHooks } from "node:module";
    const packages = new Set();
    registerHooks({ resolve(s, c, next) { const r = next(s, c); const m = /node_modules\\/((?:@[^/]+\\/)?[^/]+)\\//.exec(r.url); if (m) packages.add(m[1]); return r; } });
    await import(${JSON.stringify(new URL(entry, new URL("../../", import.meta.url)).href)});
    console.log(JSON.stringify({ packages: [...packages], undici: process.moduleLoadList.some((m) => m.includes("undici")) }));
  `;
  const out = execFileSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
  return JSON.parse(out.trim().split("\n").at(-1) as string);
}

describe("what each role loads", () => {
  it("a worker: llama.cpp and the queue; no Kubernetes client, no AWS SDK until an S3 store is opened, no undici", () => {
    const { packages, undici } = loadedBy("workers/main.ts");
    expect(packages).toContain("node-llama-cpp");
    expect(packages).toContain("bullmq");
    expect(packages.filter((p) => p.startsWith("@kubernetes/") || p.startsWith("@aws-sdk/"))).toEqual([]);
    expect(undici).toBe(false);
  });

  it("a gateway: no llama.cpp, no Kubernetes client, no AWS SDK until an S3 store is opened", () => {
    const { packages } = loadedBy("src/gateway/server/main.ts");
    expect(packages).toContain("hono");
    expect(
      packages.filter((p) => p === "node-llama-cpp" || p.startsWith("@kubernetes/") || p.startsWith("@aws-sdk/")),
    ).toEqual([]);
  });

  it("the scaler: no llama.cpp or AWS SDK", () => {
    const { packages } = loadedBy("scaler/start/main.ts");
    expect(packages.filter((p) => p === "node-llama-cpp" || p.startsWith("@aws-sdk/"))).toEqual([]);
  });
});
