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

/** The URL with its password replaced by `***`: the only form of a Redis URL that is ever printed. */
export function maskRedisUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString().replace(/\/$/, "");
  } catch {
    // Not a URL, but it may still hold a secret between ':' and '@'.
    return url.replace(/:[^:@/]*@/, ":***@");
  }
}

/**
 * `redis://[user:password@]host[:port][/db]`, or `rediss://` for TLS (the system's CAs verify the
 * server). User and password are URL-encoded.
 */
export function redisOptionsFromUrl(url: string): RedisOptions {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new Error(`REDIS_URL "${maskRedisUrl(url)}" is not a URL: expected redis://[user:password@]host:port[/db] or rediss://...`);
  }
  if (u.protocol !== "redis:" && u.protocol !== "rediss:") {
    throw new Error(`REDIS_URL "${maskRedisUrl(url)}": expected redis://[user:password@]host:port[/db] or rediss://...`);
  }
  const db = u.pathname.length > 1 ? Number(u.pathname.slice(1)) : 0;
  if (!Number.isInteger(db) || db < 0) throw new Error(`REDIS_URL "${maskRedisUrl(url)}": the path must be a database number (/0, /1, ...)`);
  return {
    host: u.hostname || "127.0.0.1",
    port: u.port ? Number(u.port) : 6379,
    username: u.username ? decodeURIComponent(u.username) : undefined,
    password: u.password ? decodeURIComponent(u.password) : undefined,
    db,
    tls: u.protocol === "rediss:" ? {} : undefined,
    // BullMQ requires this on connections it blocks on; harmless elsewhere.
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
