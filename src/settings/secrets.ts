/**
 * Settings that hold secrets, and keeping their values out of every settings error (docs/security.md,
 * "Anonymous callers"): a refusal names the variable and what is expected, never what it holds. A
 * message a refinement words with a value in it is scrubbed of any secret variable's value here,
 * whatever the refinement did; values that look like key material are treated as secrets wherever
 * they were put.
 */

/** Variables whose values are secrets, or may carry one (a URL with a password, headers with a token). */
export const SECRET_VARIABLES: ReadonlySet<string> = new Set([
  "REDIS_URL",
  "REDIS_PASSWORD",
  "PLATFORM_BOOTSTRAP_ADMIN_KEY",
  "PLATFORM_API_KEY",
  "PLATFORM_SECRETS_KEY",
  "PLATFORM_REGISTRY_TOKEN_KEY",
  "PLATFORM_OIDC_CLIENT_SECRET",
  "PLATFORM_WORKER_SECRET",
  "PLATFORM_WORKER_REDIS_SECRET",
  "AWS_SECRET_ACCESS_KEY",
  "AWS_SESSION_TOKEN",
  "HF_TOKEN",
  "OTEL_EXPORTER_OTLP_HEADERS",
  "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
]);

/** Key material by its look: a PEM block, or a private key's base64 body. */
export function looksLikeKeyMaterial(value: string): boolean {
  return /-----BEGIN [A-Z ]+-----/.test(value) || /PRIVATE KEY/.test(value);
}

/**
 * `message` with every secret value of `env` (a secret variable's, or any that looks like key
 * material) replaced by `<the value of NAME>`; each line of a multi-line value too, so no part of
 * a PEM survives.
 */
export function hideSecrets(message: string, env: NodeJS.ProcessEnv): string {
  let out = message;
  for (const [name, value] of Object.entries(env)) {
    if (!value || !(SECRET_VARIABLES.has(name) || looksLikeKeyMaterial(value))) continue;
    const pieces = [value, ...value.split(/\r?\n/)].map((p) => p.trim()).filter((p) => p.length >= 6);
    for (const piece of pieces.sort((a, b) => b.length - a.length))
      out = out.split(piece).join(`<the value of ${name}>`);
  }
  return out;
}
