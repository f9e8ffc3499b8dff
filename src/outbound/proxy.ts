/**
 * A forward proxy for a process the platform starts against a host a tenant names (skopeo
 * pulling an image), which cannot take the guarded lookup itself: every CONNECT it asks for (the
 * registry, a redirect's target such as blob storage) is resolved and checked here, at the
 * address actually connected to, so DNS is pinned and redirects are re-checked as for the
 * platform's own requests. TLS stays end to end (CONNECT tunnels it). Plain-HTTP proxy requests
 * are refused: only a loopback registry is spoken to over HTTP. Go's clients never use a proxy
 * for loopback literals and `localhost`, so where loopback is refused the process runs in a
 * network namespace whose only way out is this proxy (`isolatedCommand`); docs/security.md,
 * "Outbound calls a tenant names".
 */
import type { IncomingMessage } from "node:http";
import { connect, type Socket } from "node:net";
import { http } from "../process/node-http.ts";
import type { AddressPolicy } from "./addresses.ts";
import { guardedLookup, literalRefusal } from "./guard.ts";

export type GuardedProxy = {
  /** `http://127.0.0.1:<port>`, for HTTPS_PROXY and HTTP_PROXY; the socket's path when it listens on one. */
  url: string;
  /** The kinds of address refused so far ("loopback", "private", "plain http"...), first first. */
  refused: string[];
};

const TARGET = /^(\[[0-9a-fA-F:.]+\]|[^:[\]/\s]+):(\d{1,5})$/;

/**
 * Runs `use` with a guarded proxy listening; closed (and every tunnel ended) afterwards.
 * `policyFor("host:port")`: where a connection to that host may go (a redirect's target is judged as its own host).
 */
export async function withGuardedProxy<T>(
  policyFor: (hostPort: string) => AddressPolicy,
  use: (proxy: GuardedProxy) => Promise<T>,
  where: { socket?: string } = {},
): Promise<T> {
  const refused: string[] = [];
  const sockets = new Set<Socket>();
  const server = http.createServer((_req, res) => {
    refused.push("plain http");
    res.writeHead(403).end();
  });
  server.on("connect", (req: IncomingMessage, client: Socket, head: Buffer) => {
    sockets.add(client);
    client.on("close", () => sockets.delete(client));
    client.on("error", () => client.destroy());
    const target = TARGET.exec(req.url ?? "");
    if (!target) return client.end("HTTP/1.1 400 Bad Request\r\n\r\n");
    const host = (target[1] as string).replace(/^\[(.*)\]$/, "$1");
    const policy = policyFor(req.url as string);
    const kind = literalRefusal(host, policy);
    if (kind !== undefined) {
      refused.push(kind);
      return client.end("HTTP/1.1 403 Forbidden\r\n\r\n");
    }
    let refusedHere = false;
    let established = false;
    const upstream = connect({
      host,
      port: Number(target[2]),
      lookup: guardedLookup(policy, (k) => {
        refused.push(k);
        refusedHere = true;
        return Object.assign(new Error(`refused: ${k}`), { code: "EREFUSED" });
      }),
    });
    sockets.add(upstream);
    upstream.on("close", () => sockets.delete(upstream));
    upstream.once("connect", () => {
      established = true;
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      if (head.length > 0) upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    upstream.on("error", () => {
      if (established) return client.destroy();
      client.end(refusedHere ? "HTTP/1.1 403 Forbidden\r\n\r\n" : "HTTP/1.1 502 Bad Gateway\r\n\r\n");
    });
    client.on("close", () => upstream.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    if (where.socket) server.listen(where.socket, resolve);
    else server.listen(0, "127.0.0.1", resolve);
  });
  const url = where.socket ?? `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  try {
    return await use({ url, refused });
  } finally {
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

/** The environment variables that send a Go program's requests (skopeo's) through `proxy`. */
export function proxyEnvironment(proxy: GuardedProxy): Record<string, string> {
  return {
    HTTPS_PROXY: proxy.url,
    https_proxy: proxy.url,
    HTTP_PROXY: proxy.url,
    http_proxy: proxy.url,
    NO_PROXY: "",
    no_proxy: "",
  };
}

/**
 * The command line that runs `argv` in a network namespace of its own (util-linux `unshare`; a
 * user namespace too unless this process is root) whose only way out is the proxy's socket: a
 * forwarder inside listens on its own loopback and passes each connection to `socket`, and `argv`
 * runs with the proxy variables naming it. What Go dials itself (loopback literals, `localhost`)
 * then reaches the namespace's own empty loopback, never the host's.
 */
export function isolatedCommand(socket: string, argv: string[]): { file: string; args: string[] } {
  const forwarder = `
const net = require("node:net"), { spawn } = require("node:child_process");
const [socket, bin, ...args] = process.argv.slice(1);
const server = net.createServer((c) => {
  const u = net.connect(socket);
  c.pipe(u).pipe(c);
  u.on("error", () => c.destroy());
  c.on("error", () => u.destroy());
});
server.listen(0, "127.0.0.1", () => {
  const url = "http://127.0.0.1:" + server.address().port;
  const env = { ...process.env, HTTPS_PROXY: url, https_proxy: url, HTTP_PROXY: url, http_proxy: url, NO_PROXY: "", no_proxy: "" };
  const child = spawn(bin, args, { stdio: "inherit", env });
  child.on("error", () => process.exit(127));
  child.on("exit", (code) => process.exit(code ?? 1));
  // A timeout's SIGTERM reaches the process, which would otherwise outlive its forwarder.
  for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => child.kill(signal));
});`;
  const user = process.getuid?.() === 0 ? [] : ["--user", "--map-root-user"];
  return {
    file: "unshare",
    args: [
      ...user,
      "--net",
      "--",
      "sh",
      "-c",
      'ip link set lo up && exec "$@"',
      "sh",
      process.execPath,
      "-e",
      forwarder,
      socket,
      ...argv,
    ],
  };
}
