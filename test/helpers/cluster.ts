/**
 * A Redis Cluster on loopback for tests: three primaries, no replicas, each a
 * real `redis-server --cluster-enabled yes`, joined by `redis-cli --cluster
 * create` (Debian's packages), password-protected like a production one.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Redis } from "ioredis";
import { killAll } from "./processes.ts";
import { freePort, portIsFree, quiet } from "./redis.ts";
import { waitUntil } from "./wait.ts";

export type RedisCluster = {
  /** `redis+cluster://` URL naming every node. */
  url: string;
  password: string;
  ports: number[];
  /** A plain connection to each node (the caller must not close them). */
  nodes: Redis[];
  stop: () => Promise<void>;
};

export async function startRedisCluster(): Promise<RedisCluster> {
  // A port found free can be taken by a parallel test before redis-server binds it: try again.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce();
    } catch (e) {
      if (attempt >= 3) throw e;
    }
  }
}

async function startOnce(): Promise<RedisCluster> {
  const dir = await mkdtemp(join(tmpdir(), "platform-cluster-"));
  const password = randomBytes(16).toString("hex");
  const children: ChildProcess[] = [];
  const nodes: Redis[] = [];
  // The cluster bus listens on port + 10000: pick ports whose bus port is free too.
  const ports: number[] = [];
  while (ports.length < 3) {
    const port = await freePort();
    if (port < 55535 && !ports.includes(port) && (await portIsFree(port + 10_000))) ports.push(port);
  }
  const stop = async () => {
    for (const n of nodes) n.disconnect();
    await killAll(children);
    await rm(dir, { recursive: true, force: true });
  };
  try {
    for (const port of ports) {
      const home = join(dir, String(port));
      await mkdir(home, { recursive: true });
      const args = ["--port", String(port), "--bind", "127.0.0.1", "--dir", home, "--save", "", "--appendonly", "no"];
      args.push(
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        join(home, "nodes.conf"),
        "--cluster-node-timeout",
        "5000",
      );
      args.push("--requirepass", password, "--masterauth", password, "--maxmemory-policy", "noeviction");
      const child = spawn("redis-server", args, { stdio: "ignore" });
      children.push(child);
      // A node that cannot start (its port taken meanwhile by another test) fails fast, by name.
      let exited: number | null = null;
      child.once("exit", (code) => (exited = code ?? -1));
      const node = quiet(new Redis({ port, host: "127.0.0.1", password, maxRetriesPerRequest: 1, lazyConnect: true }));
      nodes.push(node);
      await waitUntil(`node ${port}`, async () => {
        if (exited !== null) return true;
        if (node.status === "wait" || node.status === "end") await node.connect();
        return (await node.ping()) === "PONG";
      });
      if (exited !== null) throw new Error(`redis-server on port ${port} exited with ${exited}`);
    }
    await promisify(execFile)("redis-cli", [
      "-a",
      password,
      "--no-auth-warning",
      "--cluster",
      "create",
      ...ports.map((p) => `127.0.0.1:${p}`),
      "--cluster-replicas",
      "0",
      "--cluster-yes",
    ]);
    await waitUntil("the cluster to agree", async () => {
      for (const node of nodes)
        if (!/cluster_state:ok/.test((await node.call("CLUSTER", "INFO")) as string)) return false;
      return true;
    });
  } catch (e) {
    await stop();
    throw e;
  }
  return {
    url: `redis+cluster://:${password}@${ports.map((p) => `127.0.0.1:${p}`).join(",")}`,
    password,
    ports,
    nodes,
    stop,
  };
}
