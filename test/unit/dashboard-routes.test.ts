/**
 * The gateway's dashboard file route (src/gateway/routes/dashboard.ts) on its own: files from the build
 * directory with their types, nothing outside it, and a 503 that says how to build the bundle
 * when it is missing (someone ran the sources without `npm ci`).
 */
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Hono } from "hono";
import { afterAll, describe, expect, it } from "vitest";
import { dashboardRoutes } from "../../src/gateway/routes/dashboard.ts";

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

async function appWith(files: Record<string, string> | undefined) {
  const base = await mkdtemp(join(tmpdir(), "dashboard-"));
  dirs.push(base);
  const dir = `${join(base, "dist", "dashboard")}/`;
  if (files) {
    await mkdir(dir, { recursive: true });
    for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
  }
  await writeFile(join(base, "dist", "secret.txt"), "outside").catch(() => undefined);
  const app = new Hono();
  app.route("/dashboard", dashboardRoutes(dir));
  return app;
}

describe("the dashboard route", () => {
  it("serves the page and its assets with their content types", async () => {
    const app = await appWith({ "index.html": "<html>page</html>", "app.js": "export {}", "style.css": "body{}" });
    const page = await app.request("/dashboard");
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toMatch(/^text\/html/);
    expect(page.headers.get("content-security-policy")).toMatch(/default-src 'self'/);
    expect(await page.text()).toBe("<html>page</html>");
    expect((await app.request("/dashboard/app.js")).headers.get("content-type")).toMatch(/^text\/javascript/);
    expect((await app.request("/dashboard/style.css")).headers.get("content-type")).toMatch(/^text\/css/);
    expect((await app.request("/dashboard/nope.js")).status).toBe(404);
  });

  it("never serves a file outside the build directory", async () => {
    const app = await appWith({ "index.html": "x" });
    for (const path of ["/dashboard/../secret.txt", "/dashboard/%2e%2e/secret.txt", "/dashboard/..%2fsecret.txt"]) {
      const res = await app.request(path);
      expect(await res.text(), path).not.toBe("outside");
    }
  });

  it("answers 503 saying how to build it when the bundle is missing", async () => {
    const app = await appWith(undefined);
    for (const path of ["/dashboard", "/dashboard/app.js"]) {
      const res = await app.request(path);
      expect(res.status, path).toBe(503);
      expect(await res.text()).toMatch(/npm run build:dashboard/);
    }
  });
});
