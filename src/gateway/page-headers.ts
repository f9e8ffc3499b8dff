/**
 * The headers of the gateway's own pages (the dashboard, the sign-in pages): a strict Content
 * Security Policy — this origin only, no inline script or style, never framed, forms posting only
 * here — and hono's other secure headers (no referrer, no sniffing). A page whose form leads off
 * this origin (consent redirecting to the CLI's loopback listener, sign-in to the identity
 * provider) names that one origin for its form: browsers apply form-action to the redirect after
 * a post too.
 */
import type { Context, MiddlewareHandler } from "hono";
import { secureHeaders } from "hono/secure-headers";

const others = secureHeaders({
  xFrameOptions: "DENY",
  // HSTS is the TLS terminator's to send: it would bind the whole host and its subdomains.
  strictTransportSecurity: false,
});

function policy(scripts: boolean, formTargets: string[]): string {
  return [
    "default-src 'self'",
    ...(scripts ? [] : ["script-src 'none'"]),
    "img-src 'self' data:",
    "style-src 'self'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
    ["form-action 'self'", ...formTargets].join(" "),
  ].join("; ");
}

/** `scripts`: whether the pages load this origin's scripts (the dashboard does; the sign-in pages have none). */
export function pageHeaders(options: { scripts: boolean }): MiddlewareHandler {
  return (c, next) =>
    others(c, async () => {
      await next();
      if (!c.res.headers.has("content-security-policy"))
        c.header("content-security-policy", policy(options.scripts, []));
    });
}

/** This response's page may post its form to `origin` as well (or be redirected there after posting). */
export function allowFormTarget(c: Context, origin: string): void {
  c.header("content-security-policy", policy(false, [origin]));
}
