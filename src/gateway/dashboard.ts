/**
 * Serves the web dashboard's static files (built by `npm run build:dashboard` into
 * dist/dashboard/) under /dashboard, without a key: the page holds no data of its own,
 * and every call it makes goes through the key-checked management API.
 */
import { readFile, stat } from "node:fs/promises";
import { extname, join, normalize, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { Hono } from "hono";
import type { GatewayEnv } from "./env.ts";

export const DASHBOARD_DIR = fileURLToPath(new URL("../../dist/dashboard/", import.meta.url));

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".map": "application/json",
};

export function dashboardRoutes(dir = DASHBOARD_DIR) {
  const app = new Hono<GatewayEnv>();
  const serveFile = async (relative: string) => {
    // Only names inside the build directory: a `..` in the path never leaves it.
    const path = normalize(join(dir, relative));
    if (!path.startsWith(dir.endsWith(sep) ? dir : dir + sep)) return undefined;
    const info = await stat(path).catch(() => undefined);
    if (!info?.isFile()) return undefined;
    return { body: await readFile(path), type: TYPES[extname(path)] ?? "application/octet-stream" };
  };
  const missing = () =>
    new Response("The dashboard is not built: run `npm run build:dashboard` (npm ci builds it) and reload.\n", {
      status: 503,
      headers: { "content-type": "text/plain; charset=utf-8" },
    });
  const headers = (type: string) => ({
    "content-type": type,
    // The page calls only this origin; nothing is loaded from elsewhere, and it is never framed.
    "content-security-policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "cache-control": "no-cache",
  });

  app.get("/", async () => {
    const index = await serveFile("index.html");
    return index ? new Response(index.body, { headers: headers(index.type) }) : missing();
  });
  app.get("/*", async (c) => {
    const rest = decodeURIComponent(c.req.path.slice("/dashboard/".length));
    if (rest === "") return c.redirect("/dashboard");
    const file = await serveFile(rest);
    if (file) return new Response(file.body, { headers: headers(file.type) });
    if (!(await serveFile("index.html"))) return missing();
    return new Response(`no dashboard file ${rest}\n`, { status: 404, headers: { "content-type": "text/plain; charset=utf-8" } });
  });
  return app;
}
