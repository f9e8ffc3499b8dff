/**
 * The image registries section (docs/security.md, "Outbound calls a tenant names"): which registry
 * hosts image records and deploys may name, which non-public addresses a registry may be at, and
 * which repositories the operator's pull credential (PLATFORM_IMAGE_PULL_AUTH_FILE) serves for
 * each organization.
 */
import { z } from "zod";
import { cidrList } from "./sources.ts";

export type RegistryPolicy = {
  /** PLATFORM_IMAGE_REGISTRIES, lowercased `host[:port]`: the only registries that may be named; empty: any. */
  hosts: string[];
  /** PLATFORM_IMAGE_REGISTRIES_ALLOWED_ADDRESSES: non-public `address/bits` ranges a registry may be at. */
  allowedCidrs: string[];
  /**
   * PLATFORM_IMAGE_PULL_AUTH_SCOPE: per organization, the repository prefixes the operator's pull
   * credential serves. Undefined: each organization's own namespace (`<host>/<org>/...`).
   */
  operatorScopes: Map<string, string[]> | undefined;
};

/** What `platform up` allows unless the operator says otherwise: a registry on this machine's loopback. */
export const UP_REGISTRY_ADDRESSES = "127.0.0.0/8,::1";

const HOST = /^(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:]+\])(?::\d{1,5})?$/;
const ORG = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const PREFIX = /^(?:[a-z0-9.-]+|\[[0-9a-f:]+\])(?::\d{1,5})?(?:\/[a-z0-9._-]+)*$/;

const items = (text: string, separator: string) =>
  text
    .split(separator)
    .map((t) => t.trim())
    .filter((t) => t !== "");

export const registriesShape = {
  PLATFORM_IMAGE_REGISTRIES: z
    .string()
    .default("")
    .transform((text, ctx) => {
      const hosts = items(text.toLowerCase(), ",");
      const bad = hosts.filter((h) => !HOST.test(h));
      if (bad.length > 0)
        ctx.addIssue({
          code: "custom",
          message: `expected comma-separated registry hosts as image repositories name them (registry.example.com, 127.0.0.1:5000), got "${bad.join(", ")}"`,
        });
      return hosts;
    }),
  PLATFORM_IMAGE_REGISTRIES_ALLOWED_ADDRESSES: cidrList(""),
  PLATFORM_IMAGE_PULL_AUTH_SCOPE: z
    .string()
    .optional()
    .transform((text, ctx) => {
      if (text === undefined) return undefined;
      const scopes = new Map<string, string[]>();
      for (const entry of items(text.toLowerCase(), ";")) {
        const [org = "", list = ""] = entry.split("=", 2).map((t) => t.trim());
        const prefixes = items(list, ",").map((p) => p.replace(/\/+$/, ""));
        if (!ORG.test(org) || !entry.includes("=") || prefixes.some((p) => !PREFIX.test(p) || !p.includes("/")))
          ctx.addIssue({
            code: "custom",
            message: `expected <org>=<host/path>[,<host/path>...] entries separated by ";" (acme=registry.example.com/acme,registry.example.com/shared), got "${entry}"`,
          });
        scopes.set(org, [...(scopes.get(org) ?? []), ...prefixes]);
      }
      return scopes;
    }),
};

export function registriesSettings(e: z.infer<z.ZodObject<typeof registriesShape>>): RegistryPolicy {
  return {
    hosts: e.PLATFORM_IMAGE_REGISTRIES,
    allowedCidrs: e.PLATFORM_IMAGE_REGISTRIES_ALLOWED_ADDRESSES,
    operatorScopes: e.PLATFORM_IMAGE_PULL_AUTH_SCOPE,
  };
}
