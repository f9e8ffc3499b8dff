/**
 * GET /v1/storage: the storage areas the caller may name in batch jobs
 * (and where its relative names resolve), so users and the CLI need not guess.
 */
import { Hono } from "hono";
import { rootUri, type StoragePolicy } from "../../storage/policy.ts";
import type { GatewayEnv } from "../env.ts";

export function storageRoutes(policy: StoragePolicy) {
  const app = new Hono<GatewayEnv>();
  app.get("/", (c) => {
    const viewer = c.get("caller");
    const home = policy.home(viewer);
    return c.json({
      object: "storage",
      roots: policy.areasFor(viewer).map(rootUri),
      relative_to: home === undefined ? null : rootUri({ scheme: "file", path: home }),
      note: policy.describe(viewer),
    });
  });
  return app;
}
