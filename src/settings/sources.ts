/** The sources section: what remote model sources (https://, hf://) may reach, how big and how slow they may be. */
import { z } from "zod";
import { parseCidr } from "../registry/addresses.ts";
import { DEFAULT_HF_ENDPOINT, type SourcePolicy } from "../registry/sources.ts";
import { Flag } from "./parse.ts";

export const sourcesShape = {
  PLATFORM_SOURCES_ALLOW_HTTP: Flag,
  PLATFORM_SOURCES_ALLOW_PRIVATE: Flag,
  PLATFORM_SOURCES_ALLOWED_HOSTS: z.string().default("").transform((text, ctx) => {
    const items = text.split(",").map((t) => t.trim()).filter((t) => t !== "");
    const bad = items.filter((t) => !parseCidr(t));
    if (bad.length > 0) ctx.addIssue({ code: "custom", message: `expected comma-separated addresses or CIDRs (10.0.0.0/8, fd00::/8), got "${bad.join(", ")}"` });
    return items.map((t) => parseCidr(t)!).filter((c) => c !== undefined);
  }),
  PLATFORM_SOURCES_TIMEOUT_MS: z.coerce.number().int().positive().default(4 * 3600_000),
  PLATFORM_SOURCES_IDLE_TIMEOUT_MS: z.coerce.number().int().positive().default(60_000),
  /** Sent with hf:// downloads, to HF_ENDPOINT's origin only. */
  HF_TOKEN: z.string().min(1).optional(),
  /** huggingface_hub's name and meaning: the Hub or a mirror; hf:// sources resolve there, and HF_TOKEN goes only there. */
  HF_ENDPOINT: z
    .string()
    .default(DEFAULT_HF_ENDPOINT)
    .refine((text) => {
      const u = URL.canParse(text) ? new URL(text) : undefined;
      return u !== undefined && (u.protocol === "https:" || u.protocol === "http:") && !u.username && !u.password && !u.search && !u.hash;
    }, "expected the http(s) base URL of the Hugging Face Hub or a mirror, without credentials, query or fragment (https://huggingface.co)")
    .transform((text) => text.replace(/\/+$/, "")),
};

type SourcesEnv = z.infer<z.ZodObject<typeof sourcesShape>>;

/** `maxBytes` is PLATFORM_MAX_MODEL_BYTES (core): a downloaded artifact is bounded as an uploaded one. */
export function sourcesSettings(e: SourcesEnv, maxModelBytes: number): SourcePolicy {
  return {
    allowHttp: e.PLATFORM_SOURCES_ALLOW_HTTP,
    allowPrivate: e.PLATFORM_SOURCES_ALLOW_PRIVATE,
    allowedCidrs: e.PLATFORM_SOURCES_ALLOWED_HOSTS,
    maxBytes: maxModelBytes,
    totalTimeoutMs: e.PLATFORM_SOURCES_TIMEOUT_MS,
    idleTimeoutMs: e.PLATFORM_SOURCES_IDLE_TIMEOUT_MS,
    maxRedirects: 5,
    hfEndpoint: e.HF_ENDPOINT,
    hfToken: e.HF_TOKEN,
  };
}
