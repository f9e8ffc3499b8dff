/**
 * Noticing a client that goes away before its response has been sent (to cancel its generation,
 * free its rate-limit slot), by the Node response's `close` event rather than `c.req.raw.signal`.
 *
 * Why not the signal: under @hono/node-server it is an AbortController kept by the request, and
 * the first read of the body makes undici build a real Request from it, which registers the
 * signal with a FinalizationRegistry until that Request is collected. A listener on the signal
 * that reaches the request (every listener here does: it cancels the request's job) makes the
 * Request reachable from the registry's own entry, so it is never collected and every request
 * stays in memory (about 10 KB each: a gateway that had served 10,000 chats held 100 MB more).
 * The Node response belongs to its request alone and goes with it.
 */
import type { ServerResponse } from "node:http";
import type { Context } from "hono";

export function onClientGone(c: Context, fn: () => void): void {
  const outgoing = (c.env as { outgoing?: ServerResponse } | undefined)?.outgoing;
  if (outgoing) {
    // `close` follows every response; only one that was not sent in full means the client left.
    outgoing.once("close", () => {
      if (!outgoing.writableFinished) fn();
    });
    return;
  }
  // Not under @hono/node-server (app.request() in tests): its signal is the only one there is.
  c.req.raw.signal.addEventListener("abort", fn, { once: true });
}
