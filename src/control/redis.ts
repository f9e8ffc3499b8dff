/** Redis connections and the control-plane handle every module receives. */
import { Redis, type RedisOptions } from "ioredis";
import { controlKeys, type ControlKeys } from "../contracts/naming.ts";

export type Control = {
  redis: Redis;
  /** Connection options, for the modules (BullMQ, subscribers) that need their own connections. */
  redisOptions: RedisOptions;
  prefix: string;
  keys: ControlKeys;
};

const FORMS = "redis://[user:password@]host:port[/db], rediss://... (TLS), or redis+sentinel://[user:password@]host:port[,host:port...]/<group>[/db] (Sentinel)";

/** The URL with its passwords replaced by `***`: the only form of a Redis URL that is ever printed. */
export function maskRedisUrl(url: string): string {
  // By shape, not with URL(): Sentinel URLs list several hosts, and a malformed URL may still hold a secret.
  return url.replace(/:[^:@/]*@/, ":***@").replace(/([?&]sentinel_password=)[^&]*/i, "$1***");
}

/**
 * `redis://[user:password@]host[:port][/db]`, or `rediss://` for TLS (the system's CAs verify the
 * server); or a Sentinel group, `redis+sentinel://[user:password@]host:port[,host:port...]/<group>[/db]`
 * (`rediss+sentinel://` for TLS to the data nodes and sentinels; `?sentinel_password=` when the
 * sentinels themselves require one). User and passwords are URL-encoded.
 */
export function redisOptionsFromUrl(url: string): RedisOptions {
  const sentinel = /^(rediss?)\+sentinel:\/\/(?:([^:@/]*)(?::([^@/]*))?@)?([^/?]+)\/([^/?]+)(?:\/([^/?]*))?(?:\?(.*))?$/i.exec(url);
  if (sentinel) return sentinelOptions(url, sentinel);
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
  if (!Number.isInteger(db) || db < 0) throw new Error(`REDIS_URL "${maskRedisUrl(url)}": the path must be a database number (/0, /1, ...)`);
  return db;
}

function sentinelOptions(url: string, m: RegExpExecArray): RedisOptions {
  const [, scheme, user, password, hostList, group, db, query] = m;
  const sentinels = (hostList as string).split(",").map((entry) => {
    const hp = /^\[?([^\]]+?)\]?(?::(\d+))?$/.exec(entry.trim());
    const port = Number(hp?.[2] ?? 26379);
    if (!hp || !Number.isInteger(port) || port < 1 || port > 65535) {
      throw new Error(`REDIS_URL "${maskRedisUrl(url)}": "${entry}" is not a sentinel address; expected host:port`);
    }
    return { host: hp[1] as string, port };
  });
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

export function connectControl(redisUrl: string, prefix: string): Control {
  const redisOptions = redisOptionsFromUrl(redisUrl);
  return { redis: quiet(new Redis(redisOptions)), redisOptions, prefix, keys: controlKeys(prefix) };
}

/** A fresh connection with the same options (subscribers and blocking readers need their own). */
export function duplicate(ctl: Control): Redis {
  return quiet(new Redis(ctl.redisOptions));
}

/**
 * ioredis reconnects by itself and commands wait for it; without a listener every failed
 * attempt prints a stack trace. One line per connection outage is enough.
 */
function quiet(redis: Redis): Redis {
  let reported = false;
  redis.on("error", (e: Error) => {
    if (!reported) console.error(`[redis] ${e.message} (retrying)`);
    reported = true;
  });
  redis.on("ready", () => {
    reported = false;
  });
  return redis;
}
