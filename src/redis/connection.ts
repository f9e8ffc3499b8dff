/** Redis connections and the control-plane handle every module receives. */
import { Cluster, type ClusterNode, Redis, type RedisOptions } from "ioredis";
import { controlKeys, type ControlKeys } from "../contracts/naming.ts";
import { logger } from "../telemetry/log.ts";

const log = logger("redis");

/** One Redis (plain or found through Sentinel) or a Redis Cluster: the same commands either way. */
export type RedisClient = Redis | Cluster;

export type Control = {
  redis: RedisClient;
  /** Options of each node connection (the only one, unless `clusterNodes` is set). */
  redisOptions: RedisOptions;
  /** The startup nodes when REDIS_URL names a Redis Cluster. */
  clusterNodes?: ClusterNode[];
  prefix: string;
  keys: ControlKeys;
};

/** What REDIS_URL says: a node's connection options, and the startup nodes if it names a Cluster. */
export type RedisUrlOptions = RedisOptions & { clusterNodes?: ClusterNode[] };

const FORMS =
  "redis://[user:password@]host:port[/db], rediss://... (TLS), redis+sentinel://[user:password@]host:port[,host:port...]/<group>[/db] (Sentinel), " +
  "or redis+cluster://[user:password@]host:port[,host:port...] (Redis Cluster)";

/** The URL with its passwords replaced by `***`: the only form of a Redis URL that is ever printed. */
export function maskRedisUrl(url: string): string {
  // By shape, not with URL(): Sentinel URLs list several hosts, and a malformed URL may still hold a secret.
  return url.replace(/:[^:@/]*@/, ":***@").replace(/([?&]sentinel_password=)[^&]*/i, "$1***");
}

/** `host[:port]` or `[ipv6][:port]`, as Sentinel and Cluster URLs list them. */
function hostList(url: string, list: string, defaultPort: number, what: string): ClusterNode[] {
  return list.split(",").map((entry) => {
    const hp = /^\[?([^\]]+?)\]?(?::(\d+))?$/.exec(entry.trim());
    const port = Number(hp?.[2] ?? defaultPort);
    if (!hp || !Number.isInteger(port) || port < 1 || port > 65535) {
      throw new Error(`REDIS_URL "${maskRedisUrl(url)}": "${entry}" is not a ${what} address; expected host:port`);
    }
    return { host: hp[1] as string, port };
  });
}

/**
 * `redis://[user:password@]host[:port][/db]`, or `rediss://` for TLS (the system's CAs verify the
 * server); or a Sentinel group, `redis+sentinel://[user:password@]host:port[,host:port...]/<group>[/db]`
 * (`rediss+sentinel://` for TLS to the data nodes and sentinels; `?sentinel_password=` when the
 * sentinels themselves require one); or a Redis Cluster,
 * `redis+cluster://[user:password@]host:port[,host:port...]` (`rediss+cluster://` for TLS; any
 * reachable nodes will do, the client learns the rest from them). User and passwords are URL-encoded.
 */
export function redisOptionsFromUrl(url: string): RedisUrlOptions {
  const sentinel =
    /^(rediss?)\+sentinel:\/\/(?:([^:@/]*)(?::([^@/]*))?@)?([^/?]+)\/([^/?]+)(?:\/([^/?]*))?(?:\?(.*))?$/i.exec(url);
  if (sentinel) return sentinelOptions(url, sentinel);
  const cluster = /^(rediss?)\+cluster:\/\/(?:([^:@/]*)(?::([^@/]*))?@)?([^/?]+)(\/[^?]*)?$/i.exec(url);
  if (cluster) return clusterOptions(url, cluster);
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new Error(`REDIS_URL "${maskRedisUrl(url)}" is not a URL: expected ${FORMS}`);
  }
  if (u.protocol !== "redis:" && u.protocol !== "rediss:") {
    throw new Error(`REDIS_URL "${maskRedisUrl(url)}": expected ${FORMS}`);
  }
  return {
    host: u.hostname || "127.0.0.1",
    port: u.port ? Number(u.port) : 6379,
    username: u.username ? decodeURIComponent(u.username) : undefined,
    password: u.password ? decodeURIComponent(u.password) : undefined,
    db: database(url, u.pathname.slice(1)),
    tls: u.protocol === "rediss:" ? {} : undefined,
    // BullMQ requires this on connections it blocks on; harmless elsewhere.
    maxRetriesPerRequest: null,
  };
}

function database(url: string, text: string | undefined): number {
  const db = text ? Number(text) : 0;
  if (!Number.isInteger(db) || db < 0)
    throw new Error(`REDIS_URL "${maskRedisUrl(url)}": the path must be a database number (/0, /1, ...)`);
  return db;
}

function sentinelOptions(url: string, m: RegExpExecArray): RedisOptions {
  const [, scheme, user, password, hosts, group, db, query] = m;
  const sentinels = hostList(url, hosts as string, 26379, "sentinel") as { host: string; port: number }[];
  const params = new URLSearchParams(query ?? "");
  const tls = scheme?.toLowerCase() === "rediss";
  return {
    sentinels,
    name: decodeURIComponent(group as string),
    username: user ? decodeURIComponent(user) : undefined,
    password: password ? decodeURIComponent(password) : undefined,
    sentinelPassword: params.get("sentinel_password") ?? undefined,
    db: database(url, db),
    tls: tls ? {} : undefined,
    enableTLSForSentinelMode: tls,
    // Sentinels announce a promotion: reconnect to the new primary at once rather than on the next error.
    failoverDetector: true,
    maxRetriesPerRequest: null,
  };
}

function clusterOptions(url: string, m: RegExpExecArray): RedisUrlOptions {
  const [, scheme, user, password, hosts, path] = m;
  // A cluster has database 0 only.
  if (path && path !== "/" && path !== "/0")
    throw new Error(`REDIS_URL "${maskRedisUrl(url)}": a Redis Cluster has database 0 only; leave the path out`);
  return {
    clusterNodes: hostList(url, hosts as string, 6379, "cluster node"),
    username: user ? decodeURIComponent(user) : undefined,
    password: password ? decodeURIComponent(password) : undefined,
    tls: scheme?.toLowerCase() === "rediss" ? {} : undefined,
    maxRetriesPerRequest: null,
  };
}

export function connectControl(redisUrl: string, prefix: string): Control {
  const { clusterNodes, ...redisOptions } = redisOptionsFromUrl(redisUrl);
  const ctl = { redisOptions, clusterNodes, prefix, keys: controlKeys(prefix) };
  return { ...ctl, redis: open(ctl) };
}

/** A fresh connection with the same options (subscribers and blocking readers need their own). */
export function duplicate(ctl: Control): RedisClient {
  return open(ctl);
}

/** The same, with some options changed (src/redis/subscription.ts turns resubscribing off). */
export function duplicateWith(ctl: Control, options: RedisOptions): RedisClient {
  return open({ clusterNodes: ctl.clusterNodes, redisOptions: { ...ctl.redisOptions, ...options } });
}

/**
 * A Cluster client keeps one connection per node and sends each command to the node owning
 * its key's slot; its node connections take `redisOptions` (credentials, TLS) like a plain one.
 */
function open(ctl: Pick<Control, "redisOptions" | "clusterNodes">): RedisClient {
  if (!ctl.clusterNodes) return quiet(new Redis(ctl.redisOptions));
  const tls = ctl.redisOptions.tls !== undefined;
  return quiet(
    new Cluster(ctl.clusterNodes, {
      redisOptions: ctl.redisOptions,
      // Certificates name the hosts the nodes announce; resolving them here would check the IPs instead.
      ...(tls
        ? { dnsLookup: (address: string, callback: (err: null, address: string) => void) => callback(null, address) }
        : {}),
    }),
  );
}

/**
 * ioredis reconnects by itself and commands wait for it; without a listener every failed
 * attempt prints a stack trace. One line per connection outage is enough.
 */
function quiet<T extends RedisClient>(redis: T): T {
  let reported = false;
  redis.on("error", (e: Error) => {
    if (!reported) log.warn(`${e.message} (retrying)`);
    reported = true;
  });
  redis.on("ready", () => {
    reported = false;
  });
  return redis;
}
