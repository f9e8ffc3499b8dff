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

/**
 * Prefixes a team's variable may not have (docs/security.md, "Service sandbox and replica
 * network"): `LD_` steers the system's dynamic loader (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT) and
 * `PLATFORM_` names the platform's own settings. Refused, not dropped, so nobody wonders why a
 * variable they set is not there. (PATH may be set: it only reaches the service's own command,
 * looked up inside its image; no host process runs with a service's environment.)
 */
export const RESERVED_ENV_PREFIXES = ["LD_", "PLATFORM_"] as const;

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
const ENV_NAME_MESSAGE =
  'expected a variable name such as "DATABASE_URL": up to 128 letters, digits and "_", not starting with a digit';

export const EnvName = z
  .string()
  .regex(ENV_NAME, ENV_NAME_MESSAGE)
  .refine((name) => !(RESERVED_ENV as readonly string[]).includes(name), {
    message: `is set by the platform itself (${RESERVED_ENV.join(", ")}): choose another name`,
  })
  .refine((name) => !RESERVED_ENV_PREFIXES.some((p) => name.startsWith(p)), {
    message:
      'is refused: names starting with "LD_" steer the system\'s dynamic loader and "PLATFORM_" are the platform\'s own settings; choose another name',
  });

/** A name as stored, for unsetting: one set before a name was reserved can still be removed. */
export const StoredEnvName = z.string().regex(ENV_NAME, ENV_NAME_MESSAGE);

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
