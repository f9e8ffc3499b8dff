/**
 * The host side of a replica's ports (docs/security.md, "Service sandbox and replica network"): a
 * replica lives in a network namespace of its own whose only interface is its loopback, so the
 * gateway reaches it through the scaler: a TCP listener on the host's loopback per port, each
 * connection piped to the Unix socket that the replica's forwarder (socat, inside its namespace)
 * listens on in the replica's runtime directory (root's, 0711: nobody can list it). No veth, no
 * address but loopback. The other way, for the ports of the host's loopback the operator lets
 * services reach (PLATFORM_SERVICE_HOST_PORTS): a socat inside listens on the port and connects
 * to `out-<port>.sock`, which this end connects to the host's port.
 */
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import net from "node:net";
import { join } from "node:path";

export type Forwarding = { close: () => void };

/** Runtime directories of replicas still running: removed when this process exits, whatever the replicas did. */
const live = new Set<string>();
let cleanupInstalled = false;

/**
 * A replica's runtime directory (its forwarders' sockets, its environment until the sandbox reads
 * it): short (a Unix socket's path is at most 107 bytes), root's, 0711 (searchable, not listable:
 * the forwarders run as nobody). `remove` when the replica ends; an exiting platform removes the rest.
 */
export function replicaRuntimeDir(): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), "platform-replica-"));
  chmodSync(dir, 0o711);
  live.add(dir);
  if (!cleanupInstalled) {
    cleanupInstalled = true;
    process.once("exit", () => {
      for (const d of live) rmSync(d, { recursive: true, force: true });
    });
  }
  return {
    dir,
    remove: () => {
      live.delete(dir);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * `127.0.0.1:<port>` on the host → `<dir>/<port>.sock`, for each of `ports`, and `<dir>/out-<port>.sock`
 * → the host's `127.0.0.1:<port>` for each of `hostPorts`; `onError` hears one that cannot listen.
 */
export function forwardPorts(
  dir: string,
  ports: number[],
  onError: (error: Error) => void,
  hostPorts: number[] = [],
): Forwarding {
  const inbound = ports.map((port) =>
    pipeServer(
      () => net.connect({ path: join(dir, `${port}.sock`), allowHalfOpen: true }),
      (server) => server.listen(port, "127.0.0.1"),
      `the replica's port ${port} could not be opened on the host`,
      onError,
    ),
  );
  const outbound = hostPorts.map((port) =>
    pipeServer(
      () => net.connect({ host: "127.0.0.1", port, allowHalfOpen: true }),
      // The replica's socat connects as nobody: a socket's connect needs write permission on it.
      (server) => server.listen(join(dir, `out-${port}.sock`), () => chmodSync(join(dir, `out-${port}.sock`), 0o666)),
      `the host's port ${port} could not be offered to the replica`,
      onError,
    ),
  );
  const servers = [...inbound, ...outbound];
  return {
    close: () => {
      for (const s of servers) s.close();
    },
  };
}

function pipeServer(
  connect: () => net.Socket,
  listen: (server: net.Server) => void,
  what: string,
  onError: (error: Error) => void,
): net.Server {
  const server = net.createServer({ allowHalfOpen: true }, (client) => {
    const upstream = connect();
    client.pipe(upstream);
    upstream.pipe(client);
    // A replica not listening yet, or gone: the client's connection ends at once, as a refused one would.
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.once("error", end).once("close", end);
    upstream.once("error", end).once("close", end);
  });
  server.once("error", (e) => onError(new Error(`${what}: ${e.message}`)));
  listen(server);
  return server;
}
