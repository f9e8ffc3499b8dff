/**
 * Serves the web dashboard's static files (built by `npm run build:dashboard` into
 * dist/dashboard/) under /dashboard, without a key: the page holds no data of its own,
 * and every call it makes goes through the key-checked management API.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { serveStatic } from "@hono/node-server/serve-static";
import { Hono } from "hono";
import type { GatewayEnv } from "../env.ts";
import { pageHeaders } from "../page-headers.ts";

export const DASHBOARD_DIR = fileURLToPath(new URL("../../../dist/dashboard/", import.meta.url));

const PREFIX = "/dashboard";

export function dashboardRoutes(dir = DASHBOARD_DIR) {
  const app = new Hono<GatewayEnv>();
  app.use(
    // The page calls only this origin; nothing is loaded from elsewhere, and it is never framed.
    pageHeaders({ scripts: true }),
    // Revalidated on every load, so a rebuilt bundle shows on the next reload.
    async (c, next) => {
      await next();
      c.header("cache-control", "no-cache");
    },
  );
  app.get("/*", (c, next) => (c.req.path === `${PREFIX}/` ? c.redirect(PREFIX) : next()));
  // serveStatic refuses `..` segments and percent-escapes, so no name leaves the build directory.
  // The directory is joined here rather than given as `root`, which is checked at once with a
  // console.error outside the log format: an unbuilt checkout gets the 503 below instead.
  app.get("/*", serveStatic({ rewriteRequestPath: (path) => join(dir, path.slice(PREFIX.length)) }));
  app.get("/*", (c) => {
    if (!existsSync(join(dir, "index.html"))) {
      return c.text("The dashboard is not built: run `npm run build:dashboard` (npm ci builds it) and reload.\n", 503);
    }
    return c.text(`no dashboard file ${c.req.path.slice(PREFIX.length + 1)}\n`, 404);
  });
  return app;
}
