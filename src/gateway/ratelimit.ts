/**
 * Rate limits and usage on the request path: a Hono middleware factory (configured by options,
 * as hono's bearerAuth is) that gives every /v1 request a meter (src/ratelimit/meter.ts). The
 * route admits the request through it once it knows the model and version serving it
 * (serve-text.ts, openai.ts) and reports the worker's usage when it arrives; the middleware ends
 * it when the response has been sent, failed or abandoned, and gives a limited key's responses
 * that admitted nothing their `x-ratelimit-*` headers.
 */
import type { Context, MiddlewareHandler } from "hono";
import { type MeterOptions, type RequestMeter, RequestMeters } from "../ratelimit/meter.ts";
import { onClientGone } from "./client-gone.ts";
import type { GatewayEnv } from "./env.ts";

/** Answers that are streams of messages (SSE; Connect, gRPC-Web from /rpc): their request ends with the last byte. */
const STREAMED = /^(text\/event-stream|application\/connect\+|application\/grpc)/;

/** The request's meter, where the rate-limit middleware runs (undefined elsewhere, e.g. a bare route in a test). */
export function meterOf(c: Context): RequestMeter | undefined {
  return c.get("meter") as RequestMeter | undefined;
}

/**
 * The middleware; `drain`: resolves once the writes of every request that has ended are done;
 * `close`: gives back the budget this gateway holds ahead, then drains (the gateway awaits it
 * when it closes, so no release, settlement or usage is lost at shutdown).
 */
export function rateLimit(
  options: MeterOptions,
): MiddlewareHandler<GatewayEnv> & { drain: () => Promise<void>; close: () => Promise<void> } {
  const meters = new RequestMeters(options);
  const middleware: MiddlewareHandler<GatewayEnv> = async (c, next) => {
    const meter = meters.open(c.get("caller"), {
      header: (name, value) => c.header(name, value),
      onClientGone: (fn) => onClientGone(c, fn),
    });
    c.set("meter", meter);
    try {
      await next();
    } catch (e) {
      // Hono answers handlers' errors through onError, so this is only a failing error handler: end all the same.
      meter.end({ status: 500 });
      throw e;
    }
    // On the response as it is: `c.header` now would copy it (and read its body).
    if (meter.needsHeaders) await meter.peekHeaders((name, value) => c.res.headers.set(name, value));
    const res = c.res;
    // A stream ends when its last byte is sent or the client leaves, long after the handler returned.
    // The content type first: reading `res.body` turns @hono/node-server's lightweight response into a full one.
    if (meter.admitted && STREAMED.test(res.headers.get("content-type") ?? "") && res.body) {
      c.res = new Response(
        untilClosed(res.body, () => meter.end({ streamed: true })),
        res,
      );
    } else meter.end({ status: res.status });
  };
  return Object.assign(middleware, { drain: () => meters.drain(), close: () => meters.close() });
}

/** The body, passed through; `onClose` runs once when it has been read to its end, failed or been cancelled (the client left). */
function untilClosed(body: ReadableStream<Uint8Array>, onClose: () => void): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    onClose();
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { done, value } = await reader.read();
        if (done) {
          close();
          controller.close();
        } else controller.enqueue(value);
      } catch (e) {
        close();
        controller.error(e);
      }
    },
    cancel(reason) {
      close();
      return reader.cancel(reason);
    },
  });
}
