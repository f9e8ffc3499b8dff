/**
 * What the `/rpc/*` routes need to reach a deployed service (docs/services.md): the caller's
 * organization and the fully qualified RPC service name in, the deployed service's ready replicas,
 * the protocol its scaffold speaks and its published proto image out. The real resolver is the
 * services directory (src/services/directory.ts); tests inject their own.
 */
import type { FileRegistry } from "@bufbuild/protobuf";

export type RpcReplica = { id: string; url: string /* http://127.0.0.1:PORT */ };

export type RpcTarget = {
  org: string;
  /** The deployed service's name, e.g. `items`. */
  service: string;
  /** `connect`: the Node scaffold (Connect, gRPC and gRPC-Web on one port); `grpc`: the Python scaffold (gRPC over h2c only). */
  protocol: "connect" | "grpc";
  /** The ready ones only. */
  replicas: RpcReplica[];
  /** The service's published proto image, for transcoding (read only for `grpc` upstreams). */
  descriptors: () => Promise<FileRegistry>;
};

/** `rpcService`: `<package>.<Service>` as the path names it (`platform.items.v1.ItemService`); undefined: the organization deploys none. */
export type RpcResolver = (org: string, rpcService: string) => Promise<RpcTarget | undefined>;
