/**
 * bench:fabric, section 1's Redis figures, on the echo stack (fabric-echo.ts): every command one
 * request causes (MONITOR on the private Redis, idle traffic subtracted) and what Redis keeps per
 * served request after steady runs (used_memory, keys, job hashes, the capped event stream).
 */
import { Redis } from "ioredis";
import { median, sleep, type Timed, timeEach } from "./measure.ts";

async function redisSnapshot(r: Redis): Promise<{
  usedMemory: number;
  dataset: number;
  commands: number;
  keys: number;
  hashes: number;
  streams: Record<string, number>;
  sizes: Record<string, number>;
}> {
  const memory = await r.info("memory");
  const stats = await r.info("stats");
  let keys = 0;
  let hashes = 0;
  const streams: Record<string, number> = {};
  const sizes: Record<string, number> = {};
  let cursor = "0";
  do {
    const [nextCursor, batch] = await r.scan(cursor, "COUNT", 1000);
    cursor = nextCursor;
    keys += batch.length;
    const types = await Promise.all(batch.map((k) => r.type(k)));
    // Job hashes: a model queue's keys (`<prefix>:{<model>@<version>}:<job id>`) but its meta; not the usage counters' hashes.
    hashes += batch.filter(
      (k, i) => types[i] === "hash" && /^[^{]*\{[^}]*@[^}]*\}:/.test(k) && !k.endsWith(":meta"),
    ).length;
    for (const [i, k] of batch.entries()) {
      if (types[i] === "stream") streams[k] = await r.xlen(k);
      sizes[k] = Number(await r.call("MEMORY", "USAGE", k, "SAMPLES", "0"));
    }
  } while (cursor !== "0");
  const field = (info: string, name: string) => Number((info.match(new RegExp(`^${name}:(\\d+)`, "m")) ?? [])[1]);
  return {
    usedMemory: field(memory, "used_memory"),
    dataset: field(memory, "used_memory_dataset"),
    commands: field(stats, "total_commands_processed"),
    keys,
    hashes,
    streams,
    sizes,
  };
}

export type RedisFigures = Awaited<ReturnType<typeof measureRedis>>;

export async function measureRedis(options: {
  redisUrl: string;
  prefix: string;
  echo: () => Promise<unknown>;
  steadyRequests: number;
  steadyBlocks: number;
}) {
  const { redisUrl, prefix, echo, steadyRequests: STEADY_REQUESTS, steadyBlocks: STEADY_BLOCKS } = options;
  // Redis round trips: every command one request causes, from MONITOR on this private Redis.
  // Commands a Lua script runs are listed apart: they cost no round trip.
  const redisProbe = new Redis(redisUrl);
  const monitor = await redisProbe.monitor();
  let monitoring = false;
  const seen: { source: string; command: string }[] = [];
  monitor.on("monitor", (_time: string, args: string[], source: string) => {
    if (monitoring) seen.push({ source, command: String(args[0]).toLowerCase() });
  });
  await sleep(200);
  // Idle traffic (blocking reads being re-issued, heartbeats) over a window as long as the probe's, to subtract.
  const PROBE_REQUESTS = 20;
  monitoring = true;
  const idleStart = performance.now();
  await sleep(1000);
  monitoring = false;
  const idleMs = performance.now() - idleStart;
  const idleCommands = seen.filter((s) => s.source !== "lua").length;
  seen.length = 0;
  monitoring = true;
  const probeStart = performance.now();
  for (let i = 0; i < PROBE_REQUESTS; i++) await echo();
  await sleep(50);
  monitoring = false;
  const probeMs = performance.now() - probeStart;
  const clientCommands = seen.filter((s) => s.source !== "lua");
  const commandCounts: Record<string, number> = {};
  for (const c of clientCommands) commandCounts[c.command] = (commandCounts[c.command] ?? 0) + 1;
  for (const k of Object.keys(commandCounts)) commandCounts[k] = (commandCounts[k] as number) / PROBE_REQUESTS;
  const luaPerRequest = seen.filter((s) => s.source === "lua").length / PROBE_REQUESTS;
  const commandsPerRequest = (clientCommands.length - (idleCommands * probeMs) / idleMs) / PROBE_REQUESTS;
  monitor.disconnect();

  // What Redis keeps per served request: memory and keys before and after steady runs. The queue's
  // event stream is capped (BullMQ: ~10,000 entries, trimmed a node of ~100 at a time) and fills up
  // with the first requests, each entry the size of its event: until every entry is one of this
  // traffic's, it grows at a constant length (the c=1 rounds above left small `drained` events).
  // So the warm-up runs this traffic until more entries than the cap have been added, and the
  // figure is over STEADY_BLOCKS runs in a row: the trim's node-sized steps (±15-60 KB between two
  // snapshots, whatever the requests in between) are noise that a longer run divides away, not
  // something kept per request; each block's figure is printed to show it.
  const eventStreams = async () => (await redisProbe.keys(`${prefix}:*:events`)).filter((k) => !k.includes(":cp:"));
  const entriesAdded = async (k: string) => {
    const info = (await redisProbe.call("XINFO", "STREAM", k)) as unknown[];
    return Number(info[info.indexOf("entries-added") + 1]);
  };
  const streamKey = (await eventStreams())[0] as string;
  // BullMQ keeps the cap in the queue's meta hash (Queue option streams.events.maxLen).
  const cap = Number(await redisProbe.hget(streamKey.replace(/:events$/, ":meta"), "opts.maxLenEvents")) || 10_000;
  const addedAtStart = await entriesAdded(streamKey);
  while ((await entriesAdded(streamKey)) - addedAtStart < cap * 1.2) await timeEach(1000, 8, echo);
  /** The gateway trims reply entries it has routed at most every 5 s, on its next request: snapshots are taken just after such a trim. */
  async function settledSnapshot() {
    await sleep(5500);
    await echo();
    await sleep(500);
    return redisSnapshot(redisProbe);
  }
  const snapshots = [await settledSnapshot()];
  const steadyRuns: Timed[] = [];
  for (let b = 0; b < STEADY_BLOCKS; b++) {
    steadyRuns.push(await timeEach(STEADY_REQUESTS, 8, echo));
    snapshots.push(await settledSnapshot());
  }
  const before = snapshots[0] as Awaited<ReturnType<typeof redisSnapshot>>;
  const after = snapshots.at(-1) as Awaited<ReturnType<typeof redisSnapshot>>;
  const blockRetained = snapshots
    .slice(1)
    .map((s, i) => (s.usedMemory - (snapshots[i] as typeof s).usedMemory) / STEADY_REQUESTS);
  const redisFigures = {
    commands_per_request_monitor: commandsPerRequest,
    commands_by_name_per_request: commandCounts,
    lua_commands_per_request: luaPerRequest,
    idle_commands_per_s: (idleCommands / idleMs) * 1000,
    steady_requests: STEADY_REQUESTS,
    steady_blocks: STEADY_BLOCKS,
    steady_requests_per_s: median(steadyRuns.map((r) => r.perSecond)),
    steady_commands_per_request: (after.commands - before.commands) / (STEADY_REQUESTS * STEADY_BLOCKS),
    used_memory_before: before.usedMemory,
    used_memory_after: after.usedMemory,
    // (used_memory after − before) ÷ requests over all the blocks; and each block's, to show the noise.
    retained_bytes_per_request: (after.usedMemory - before.usedMemory) / (STEADY_REQUESTS * STEADY_BLOCKS),
    retained_bytes_per_request_by_block: blockRetained,
    // used_memory less Redis's own overhead (client buffers, AOF buffer, scripts): the keys alone.
    retained_dataset_bytes_per_request: (after.dataset - before.dataset) / (STEADY_REQUESTS * STEADY_BLOCKS),
    // The bounded part: the queue's event stream at its cap, whatever the traffic.
    event_stream_bytes: after.sizes[streamKey] ?? 0,
    event_stream_entries: after.streams[streamKey] ?? 0,
    keys_left: after.keys - before.keys,
    job_hashes_left: after.hashes - before.hashes,
    // Where the dataset's growth went, key by key (MEMORY USAGE), the largest first.
    keys_grown_bytes: Object.fromEntries(
      Object.keys({ ...before.sizes, ...after.sizes })
        .map((k) => [k, (after.sizes[k] ?? 0) - (before.sizes[k] ?? 0)] as const)
        .filter(([, d]) => d !== 0)
        .sort((a, b) => Math.abs(b[1]) - Math.abs(a[1]))
        .slice(0, 8),
    ),
    stream_entries_added: Object.fromEntries(
      Object.entries(after.streams).map(([k, n]) => [k, n - (before.streams[k] ?? 0)]),
    ),
  };
  redisProbe.disconnect();
  return redisFigures;
}
