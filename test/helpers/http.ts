/**
 * Sending a request the server may answer before reading all of its body (a
 * 413 on Content-Length, say). It goes on a connection of its own (node:http,
 * no keep-alive pool): the server drains such a body only briefly, then closes
 * the connection, and a pooled client would see the next request on it fail.
 */
import { request } from "node:http";

export type OversizedInit = {
  url: string;
  method?: string;
  headers?: Record<string, string>;
  body: Uint8Array | string | ReadableStream<Uint8Array>;
};

export function sendOnOwnConnection(init: OversizedInit): Promise<Response> {
  return new Promise((resolve, reject) => {
    const req = request(init.url, { method: init.method ?? "POST", agent: false, headers: init.headers });
    req.on("response", async (res) => {
      const chunks: Buffer[] = [];
      for await (const c of res) chunks.push(c as Buffer);
      resolve(new Response(Buffer.concat(chunks), { status: res.statusCode }));
    });
    req.on("error", reject);
    if (init.body instanceof ReadableStream) {
      // No Content-Length: node sends it chunked.
      void (async () => {
        try {
          for await (const c of init.body as ReadableStream<Uint8Array>)
            if (!req.write(c)) await new Promise((r) => req.once("drain", r));
          req.end();
        } catch {
          // the server stopped reading: its answer still comes
        }
      })();
    } else {
      req.setHeader("content-length", Buffer.byteLength(init.body));
      req.end(init.body);
    }
  });
}
