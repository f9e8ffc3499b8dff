/**
 * What an organization's pull credentials accept (docs/services.md, "Pulling from a private
 * registry"): a registry host as image repositories name it, a username and a password, each
 * bounded so what a caller sends cannot grow Redis without limit.
 */
import { z } from "zod";

/** Hosts an organization may hold credentials for: enough for every registry a team uses. */
export const MAX_HOSTS_PER_ORG = 50;
/** Long enough for cloud registries' tokens (ECR's are about 2 KB, a GCR JSON key about 2.5 KB). */
export const MAX_PASSWORD_BYTES = 16 * 1024;

/** `host[:port]`, lowercased: the first component of an image repository (src/container-images/names.ts). */
export const RegistryHost = z
  .string()
  .max(255, "expected at most 255 characters")
  .transform((h) => h.toLowerCase())
  .pipe(
    z
      .string()
      .regex(
        /^(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:]+\])(?::[0-9]{1,5})?$/,
        "expected a registry host as image repositories name it: host[:port], e.g. registry.example.com:5000 (no scheme, no path)",
      ),
  );

export const RegistryUsername = z
  .string()
  .min(1, "expected the registry username")
  .max(256, "expected at most 256 characters")
  .regex(/^[^\s:]+$/, "expected a username without spaces or ':'");

export const RegistryPassword = z
  .string()
  .min(1, "expected the password (on stdin: --password-stdin)")
  .refine((p) => Buffer.byteLength(p) <= MAX_PASSWORD_BYTES, `expected at most ${MAX_PASSWORD_BYTES} bytes`)
  .refine((p) => !/[\r\n]/.test(p), "expected one line (no line breaks)");

/** 127.0.0.0/8, localhost, [::1]: the only registries spoken to over plain HTTP (docs/publish.md, "TLS"). */
export function isLoopbackHost(host: string): boolean {
  const name = host.startsWith("[") ? host.slice(0, host.indexOf("]") + 1) : (host.split(":")[0] as string);
  return name === "localhost" || name === "[::1]" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(name);
}
