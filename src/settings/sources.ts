/** The sources section: what remote model sources (https://, hf://) may reach, how big and how slow they may be. */
import { isIP } from "node:net";
import { z } from "zod";
import { Flag } from "./parse.ts";

export type SourcePolicy = {
  allowHttp: boolean;
  allowPrivate: boolean;
  /** Non-public ranges sources may reach all the same, as `address/bits` (parseCidr's form). */
  allowedCidrs: string[];
  maxBytes: number;
  /** The whole download, connect to last byte. */
  totalTimeoutMs: number;
  /** No byte (or no answer) for this long fails the download. */
  idleTimeoutMs: number;
  maxRedirects: number;
  /** The Hugging Face Hub or a mirror that hf:// names resolve against (HF_ENDPOINT); the token goes to its origin only. */
  hfEndpoint: string;
  /** HF_TOKEN: for gated and private repositories. */
  hfToken?: string;
};

/** huggingface_hub's default for HF_ENDPOINT. */
export const DEFAULT_HF_ENDPOINT = "https://huggingface.co";

/** `10.0.0.0/8`, `fd00::/8` or one address (`[…]` allowed) as `address/bits`; undefined when it is neither. */
export function parseCidr(text: string): string | undefined {
  const [spelled = "", bitsText] = text.trim().split("/");
  const address = spelled.replace(/^\[(.*)\]$/, "$1");
  const family = isIP(address);
  if (family === 0) return undefined;
  const max = family === 4 ? 32 : 128;
  if (bitsText === undefined) return `${address}/${max}`;
  const bits = Number(bitsText);
  return /^\d+$/.test(bitsText) && bits <= max ? `${address}/${bits}` : undefined;
}

/** Comma-separated addresses or CIDRs, as `address/bits` (parseCidr's form). */
export const cidrList = (fallback: string) =>
  z
    .string()
    .default(fallback)
    .transform((text, ctx) => {
      const items = text
        .split(",")
        .map((t) => t.trim())
        .filter((t) => t !== "");
      const bad = items.filter((t) => parseCidr(t) === undefined);
      if (bad.length > 0)
        ctx.addIssue({
          code: "custom",
          message: `expected comma-separated addresses or CIDRs (10.0.0.0/8, fd00::/8), got "${bad.join(", ")}"`,
        });
      return items.flatMap((t) => parseCidr(t) ?? []);
    });

export const sourcesShape = {
  PLATFORM_SOURCES_ALLOW_HTTP: Flag,
  PLATFORM_SOURCES_ALLOW_PRIVATE: Flag,
  PLATFORM_SOURCES_ALLOWED_HOSTS: cidrList(""),
  PLATFORM_SOURCES_TIMEOUT_MS: z.coerce
    .number()
    .int()
    .positive()
    .default(4 * 3600_000),
  PLATFORM_SOURCES_IDLE_TIMEOUT_MS: z.coerce.number().int().positive().default(60_000),
  /** Sent with hf:// downloads, to HF_ENDPOINT's origin only. */
  HF_TOKEN: z.string().min(1).optional(),
  /** huggingface_hub's name and meaning: the Hub or a mirror; hf:// sources resolve there, and HF_TOKEN goes only there. */
  HF_ENDPOINT: z
    .string()
    .default(DEFAULT_HF_ENDPOINT)
    .refine((text) => {
      const u = URL.canParse(text) ? new URL(text) : undefined;
      return (
        u !== undefined &&
        (u.protocol === "https:" || u.protocol === "http:") &&
        !u.username &&
        !u.password &&
        !u.search &&
        !u.hash
      );
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
