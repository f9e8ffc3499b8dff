/**
 * The host side of a replica's ports (docs/security.md, "Service sandbox and replica network"): a
 * replica lives in a network namespace of its own whose only interface is its loopback, so the
 * gateway reaches it through the scaler: a TCP listener on the host's loopback per port, each
 * connection piped to the Unix socket that the replica's forwarder (socat, inside its namespace)
 * listens on in the replica's runtime directory (0700, root's). No veth, no address but loopback.
 */
import net from "node:net";
import { join } from "node:path";

export type Forwarding = { close: () => void };

/** `127.0.0.1:<port>` on the host → `<dir>/<port>.sock`, for each port; `onError` hears a port that cannot listen. */
export function forwardPorts(dir: string, ports: number[], onError: (error: Error) => void): Forwarding {
  const servers = ports.map((port) => {
    const server = net.createServer({ allowHalfOpen: true }, (client) => {
      const upstream = net.connect({ path: join(dir, `${port}.sock`), allowHalfOpen: true });
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
    server.once("error", (e) =>
      onError(new Error(`the replica's port ${port} could not be opened on the host: ${e.message}`)),
    );
    server.listen(port, "127.0.0.1");
    return server;
  });
  return {
    close: () => {
      for (const s of servers) s.close();
    },
  };
}
