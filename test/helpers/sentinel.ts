/**
 * A Redis Sentinel group on loopback for failover tests: a primary, one
 * replica and three sentinels (quorum 2), all password-protected, each a real
 * `redis-server` (Debian's redis-sentinel is only `redis-server --sentinel`).
 * Sentinels notice a dead primary after `downAfterMs` and promote the replica.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { killAll } from "./processes.ts";
import { freePort, quiet } from "./redis.ts";
import { waitUntil } from "./wait.ts";

export const SENTINEL_GROUP = "platform-primary";

export type SentinelGroup = {
  /** `redis+sentinel://` URL naming the three sentinels and the group. */
  url: string;
  password: string;
  primaryPort: number;
  replicaPort: number;
  /** SIGKILLs the current primary; resolves once a sentinel names the new one. */
  /** `onKilled` runs right after the SIGKILL, before the (seconds long) promotion is waited for. */
  killPrimary: (onKilled?: () => void) => Promise<{ killedAt: number; promotedAt: number; newPrimaryPort: number }>;
  stop: () => Promise<void>;
};

export async function startSentinelGroup(options: { downAfterMs?: number } = {}): Promise<SentinelGroup> {
  const dir = await mkdtemp(join(tmpdir(), "platform-sentinel-"));
  const password = randomBytes(16).toString("hex");
  const downAfterMs = options.downAfterMs ?? 1000;
  const children = new Map<number, ChildProcess>();

  const start = async (name: string, port: number, lines: string[], sentinel = false) => {
    const home = join(dir, name);
    await mkdir(home, { recursive: true });
    const conf = join(home, "redis.conf");
    await writeFile(conf, [`port ${port}`, "bind 127.0.0.1", `dir ${home}`, 'save ""', ...lines, ""].join("\n"));
    const child = spawn("redis-server", sentinel ? [conf, "--sentinel"] : [conf], { stdio: "ignore" });
    children.set(port, child);
    await waitUntil(`${name} on ${port}`, async () => {
      const probe = quiet(
        new Redis({
          port,
          host: "127.0.0.1",
          password: sentinel ? undefined : password,
          lazyConnect: true,
          maxRetriesPerRequest: 0,
          retryStrategy: () => null,
        }),
      );
      try {
        await probe.connect();
        return (await probe.ping()) === "PONG";
      } finally {
        probe.disconnect();
      }
    });
  };

  const primaryPort = await freePort();
  const replicaPort = await freePort();
  const data = [
    `requirepass ${password}`,
    `masterauth ${password}`,
    "appendonly yes",
    "appendfsync everysec",
    "maxmemory-policy noeviction",
  ];
  await start("primary", primaryPort, data);
  await start("replica", replicaPort, [...data, `replicaof 127.0.0.1 ${primaryPort}`]);
  const sentinelPorts = [await freePort(), await freePort(), await freePort()];
  for (const [i, port] of sentinelPorts.entries()) {
    await start(
      `sentinel-${i}`,
      port,
      [
        `sentinel monitor ${SENTINEL_GROUP} 127.0.0.1 ${primaryPort} 2`,
        `sentinel auth-pass ${SENTINEL_GROUP} ${password}`,
        `sentinel down-after-milliseconds ${SENTINEL_GROUP} ${downAfterMs}`,
        `sentinel failover-timeout ${SENTINEL_GROUP} 10000`,
        `sentinel parallel-syncs ${SENTINEL_GROUP} 1`,
      ],
      true,
    );
  }
  const sentinel = quiet(new Redis({ port: sentinelPorts[0], host: "127.0.0.1", maxRetriesPerRequest: 1 }));
  const primaryNow = async () =>
    Number(((await sentinel.call("SENTINEL", "get-master-addr-by-name", SENTINEL_GROUP)) as string[])[1]);
  // The replica has synced and every sentinel knows the others: a failover can be agreed on.
  await waitUntil("the replica to sync", async () => {
    const r = quiet(new Redis({ port: replicaPort, host: "127.0.0.1", password, maxRetriesPerRequest: 1 }));
    try {
      return /master_link_status:up/.test(await r.info("replication"));
    } finally {
      r.disconnect();
    }
  });
  await waitUntil("the sentinels to see each other", async () => {
    const info = (await sentinel.call("SENTINEL", "master", SENTINEL_GROUP)) as string[];
    return Number(info[info.indexOf("num-other-sentinels") + 1]) >= 2;
  });

  return {
    url: `redis+sentinel://:${password}@${sentinelPorts.map((p) => `127.0.0.1:${p}`).join(",")}/${SENTINEL_GROUP}`,
    password,
    primaryPort,
    replicaPort,
    killPrimary: async (onKilled) => {
      const current = await primaryNow();
      children.get(current)?.kill("SIGKILL");
      const killedAt = Date.now();
      onKilled?.();
      await waitUntil("a new primary", async () => (await primaryNow()) !== current, 60_000);
      return { killedAt, promotedAt: Date.now(), newPrimaryPort: await primaryNow() };
    },
    stop: async () => {
      sentinel.disconnect();
      await killAll(children.values());
      await rm(dir, { recursive: true, force: true });
    },
  };
}
