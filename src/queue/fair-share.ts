/**
 * Priority bands and fair share between callers on one endpoint's queue (docs/traffic.md, "Fair
 * share and priority"). Every online job the gateway enqueues gets a BullMQ priority: its band
 * (the request's `priority`, vLLM's field, or its key's default) picks a range of priorities,
 * and within the range start-time fair queueing over (organization, key) flows picks its place:
 * a job's tag is the later of the band's virtual time (the tag of its first waiting job) and its
 * flow's finish tag, which then advances by the job's tokens. A tenant that floods the endpoint
 * pushes only its own tags out; another's next request lands at the head of the band. An
 * organization's keys split the organization's one share (a key's cost counts once per key of
 * its org with work ahead). The tokens charged are estimated at enqueue (prompt plus
 * max_tokens) and settled to the real count when the answer comes.
 *
 * Batch records stay below every band (BATCH_PRIORITY); jobs a producer enqueues without a
 * priority are served before them all, as BullMQ serves unprioritized jobs first.
 */
import { BATCH_PRIORITY, MAX_PRIORITY, MIN_PRIORITY } from "../contracts/job.ts";
import type { Queue } from "bullmq";
import type { RedisClient } from "../redis/connection.ts";
import { LuaScript } from "../redis/scripts.ts";

/** Priorities per band: BATCH_PRIORITY's range split between the bands, with room to spare. */
const BAND_WIDTH = Math.floor((BATCH_PRIORITY - 1) / (MAX_PRIORITY - MIN_PRIORITY + 2));
/** Tokens per unit of tag: a band holds BAND_WIDTH × 16 tokens of lag before its tail goes first come, first served. */
const TOKENS_PER_UNIT = 16;
/** A band's flows are forgotten this long after its last job arrived. */
const FLOWS_TTL_MS = 10 * 60_000;

export type Tenant = { org: string; key: string };

/** What the dispatcher needs to place a job fairly. `tokens`: its estimated cost, prompt plus what it may generate. */
export type FairPlace = { tenant: Tenant; priority: number; tokens: number };

/** The band's lowest BullMQ priority. */
function bandBase(priority: number): number {
  return 1 + (priority - MIN_PRIORITY) * BAND_WIDTH;
}

/**
 * A BullMQ priority's rank for a replica's own waiting jobs (workers/slots.ts): lower first. A
 * producer's unprioritized job ranks first, as BullMQ serves it; batch records rank last.
 */
export function bandOf(bullPriority: number | undefined): number {
  if (!bullPriority) return -1;
  if (bullPriority >= BATCH_PRIORITY) return MAX_PRIORITY - MIN_PRIORITY + 1;
  return Math.floor((bullPriority - 1) / BAND_WIDTH);
}

const tag = new LuaScript(import.meta.url, "fair-tag");

/** BullMQ's score of a prioritized job: priority × 2³² + a counter. */
const SCORE_SHIFT = 2 ** 32;

/** Online jobs waiting in `queue`: a producer's unprioritized ones and every band's, not batch records. */
export async function onlineWaiting(redis: RedisClient, queue: Queue): Promise<number> {
  const [[, plain], [, banded]] = (await redis
    .pipeline()
    .llen(queue.keys.wait as string)
    .zcount(queue.keys.prioritized as string, "-inf", `(${BATCH_PRIORITY * SCORE_SHIFT}`)
    .exec()) as [[unknown, number], [unknown, number]];
  return plain + banded;
}

/** A job's priority at the head of its band, for a queue where nothing waits (no tag to compute). */
export function bandHead(priority: number): number {
  return bandBase(priority);
}

/** The flows of the band of `priority` on the queue whose keys start with `queueKey` (BullMQ's `<prefix>:<queue>`, in its hash slot). */
const flowsKey = (queueKey: string, priority: number) => `${queueKey}:fair:${priority}`;

export type Placed = {
  /** The job's BullMQ priority. */
  bullPriority: number;
  /** Charge the flow for the tokens the job really used instead of the estimate (no-op once the flow is forgotten). */
  settle: (redis: RedisClient, tokens: number) => Promise<void>;
};

/** The job's BullMQ priority on the queue (`prioritized`: its BullMQ sorted set). */
export async function placeFairly(
  redis: RedisClient,
  queueKey: string,
  prioritized: string,
  place: FairPlace,
): Promise<Placed> {
  const flows = flowsKey(queueKey, place.priority);
  const cost = Math.max(1, place.tokens) / TOKENS_PER_UNIT;
  const [bullPriority, keys] = (await tag.run(
    redis,
    [prioritized, flows],
    [bandBase(place.priority), BAND_WIDTH, place.tenant.org, place.tenant.key, cost, FLOWS_TTL_MS],
  )) as [number, number];
  const member = `${place.tenant.org}\n${place.tenant.key}`;
  return {
    bullPriority,
    settle: async (r, tokens) => {
      const delta = ((tokens - place.tokens) / TOKENS_PER_UNIT) * keys;
      if (Math.abs(delta) >= 1) await r.zadd(flows, "XX", "INCR", delta, member);
    },
  };
}
