/**
 * What the services noun accepts as names (docs/services.md): a deployed service's name (a DNS
 * label, as the scaffold's name is: it becomes Kubernetes objects' names), its repo type, and the
 * names and values of its environment variables and secrets.
 */
import { z } from "zod";

export const ServiceName = z
  .string()
  .regex(
    /^[a-z](?:[a-z0-9-]{0,38}[a-z0-9])?$/,
    'expected a service name such as "items": 1-40 lowercase letters, digits and "-", starting with a letter and not ending with "-"',
  );

/** `js` services speak Connect (the Node scaffold), `python` ones gRPC (the Python scaffold). */
export const RepoType = z.enum(["js", "python"], { message: 'expected "js" or "python"' });
export type RepoType = z.infer<typeof RepoType>;
export type UpstreamProtocol = "connect" | "grpc";
export const protocolOf = (repoType: RepoType): UpstreamProtocol => (repoType === "js" ? "connect" : "grpc");

/** Variables the platform sets itself: a team's value would break how replicas are reached. */
export const RESERVED_ENV = ["PORT", "HOST", "METRICS_PORT"] as const;

export const EnvName = z
  .string()
  .regex(
    /^[A-Za-z_][A-Za-z0-9_]{0,127}$/,
    'expected a variable name such as "DATABASE_URL": up to 128 letters, digits and "_", not starting with a digit',
  )
  .refine((name) => !(RESERVED_ENV as readonly string[]).includes(name), {
    message: `is set by the platform itself (${RESERVED_ENV.join(", ")}): choose another name`,
  });

/** 32 KiB a value: a certificate or a JSON credential fits; a file does not belong in the environment. */
export const MAX_ENV_VALUE_BYTES = 32 * 1024;
/** Variables and secrets per service, each. */
export const MAX_ENV_ENTRIES = 200;

export const EnvValue = z
  .string()
  .refine((v) => Buffer.byteLength(v) <= MAX_ENV_VALUE_BYTES, {
    message: `expected at most ${MAX_ENV_VALUE_BYTES} bytes`,
  })
  .refine((v) => !v.includes("\0"), { message: "contains a NUL byte, which no environment variable can hold" });

/** The overview page (Markdown), at most 64 KiB. */
export const MAX_OVERVIEW_BYTES = 64 * 1024;

/** A fully qualified RPC service, as routed: `<package>.<Service>`. */
export const RpcServiceName = z
  .string()
  .max(255)
  .regex(
    /^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+$/,
    "expected <package>.<Service>, e.g. platform.items.v1.ItemService",
  );
