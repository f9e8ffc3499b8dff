/**
 * Prefix-affine dispatch (docs/scaling.md, "Prefix-affine dispatch"): each replica has a lane of
 * its own, a BullMQ queue beside its endpoint's, which it serves along with the shared one. The
 * gateway hashes a prompt's leading characters onto the endpoint's ready replicas (consistent
 * hashing with bounded loads, KubeAI's CHWBL) and puts the job in that replica's lane, so a
 * conversation's next turn reaches the replica whose sequences hold its cache. A job waits there
 * at most a short time, and only while the lane is short; then it moves to the shared queue,
 * which any replica serves. A dead replica's lane is moved there too (reclaim.ts), as is a lane
 * job its replica hands back (a drain).
 */
import { createHash } from "node:crypto";
import type { Job, Queue } from "bullmq";
import type { RedisClient } from "../redis/connection.ts";
import { LuaScript } from "../redis/scripts.ts";

/** The lane of `replicaId` beside the queue `queue` (in its hash slot: the braces stay first). */
export function laneName(queue: string, replicaId: string): string {
  return `${queue}~lane~${replicaId}`;
}

/** The shared queue a lane belongs to, or undefined for a queue that is no lane. */
export function sharedOf(queue: string): string | undefined {
  const at = queue.indexOf("~lane~");
  return at < 0 ? undefined : queue.slice(0, at);
}

/** The prompt's leading characters that pick its replica: a system prompt and first turn, or a prompt's head. */
export const PREFIX_CHARS = 256;
/** A replica may take this much more than the average load before its keys go to the next on the ring (KubeAI's default). */
const LOAD_FACTOR = 1.25;
/** Points per replica on the ring: enough for an even spread over a few replicas. */
const VNODES = 64;

/** A ready replica with a lane; `load`: the jobs it holds; `parallel`: its sequences, the most its lane holds. */
export type LaneReplica = { id: string; lane: string; load: number; parallel: number };

/**
 * The text whose hash picks a replica: what a conversation's turns share, its messages up to the
 * first user turn (a system prompt and the first question), or a prompt's head; at most PREFIX_CHARS.
 * Undefined for work with no cache to reuse (embeddings, images): it goes to the shared queue.
 */
export function prefixOf(job: {
  kind: string;
  messages?: { role: string; content: string }[];
  prompt?: unknown;
}): string | undefined {
  // Only text generation has a cache to reuse (an image job's prompt does not).
  if (job.kind !== "chat" && job.kind !== "completion" && job.kind !== "generate") return undefined;
  if (job.messages) {
    const first = job.messages.findIndex((m) => m.role === "user");
    const shared = first < 0 ? job.messages : job.messages.slice(0, first + 1);
    return shared
      .map((m) => m.content)
      .join("\n")
      .slice(0, PREFIX_CHARS);
  }
  if (typeof job.prompt === "string") return job.prompt.slice(0, PREFIX_CHARS);
  if (Array.isArray(job.prompt)) return job.prompt.slice(0, PREFIX_CHARS / 4).join(",");
  return undefined;
}

const hash64 = (text: string) => createHash("sha256").update(text).digest().readBigUInt64BE(0);

/**
 * Consistent hashing with bounded loads: the first replica clockwise from the prefix's hash whose
 * load (jobs held) stays within LOAD_FACTOR × the average after taking this one. Undefined when
 * there is none to choose.
 */
export function chooseReplica(prefix: string, replicas: LaneReplica[]): LaneReplica | undefined {
  if (replicas.length === 0) return undefined;
  const total = replicas.reduce((sum, r) => sum + r.load, 0) + 1;
  const bound = Math.ceil((total / replicas.length) * LOAD_FACTOR);
  const ring = replicas
    .flatMap((r) => Array.from({ length: VNODES }, (_, i) => ({ at: hash64(`${r.id}#${i}`), r })))
    .sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0));
  const h = hash64(prefix);
  let start = ring.findIndex((p) => p.at >= h);
  if (start < 0) start = 0;
  const seen = new Set<string>();
  for (let i = 0; i < ring.length && seen.size < replicas.length; i++) {
    const { r } = ring[(start + i) % ring.length] as { r: LaneReplica };
    if (seen.has(r.id)) continue;
    seen.add(r.id);
    if (r.load + 1 <= bound) return r;
  }
  return undefined;
}

/** Takes a waiting job out of its queue's lists in one step (lua/take-waiting.lua). */
const takeWaiting = new LuaScript(import.meta.url, "take-waiting");

/**
 * Moves a job waiting in `from` (a lane) to `to` (its shared queue), as it is, with the same id.
 * False when it could not be moved: it was taken meanwhile, or is gone. The job leaves `from`'s
 * lists atomically before it is copied: BullMQ's own remove answers "removed" for a job that a
 * worker took and finished meanwhile, and two callers (a reclaim and a lane's timer) could both
 * copy it, or copy one already answered, which then ran twice.
 */
export async function moveWaiting(redis: RedisClient, from: Queue, to: Queue, id: string): Promise<boolean> {
  const job = await from.getJob(id);
  if (!job) return false;
  const keys = [from.keys.wait as string, from.keys.prioritized as string];
  if (Number(await takeWaiting.run(redis, keys, [id])) !== 1) return false;
  // Copied first, so the job is in a queue again before anything else can fail; then, in no list
  // and so unlocked and nobody's, BullMQ's remove clears its hash and bookkeeping in the lane.
  await addLike(redis, to, job);
  await job.remove();
  return true;
}

/** A copy of `job` (its data, priority, the replicas it lost) on `to`, under the same id. */
async function addLike(redis: RedisClient, to: Queue, job: Job): Promise<void> {
  const id = job.id as string;
  await to.add(job.name, job.data, {
    jobId: id,
    priority: job.opts.priority,
    removeOnComplete: job.opts.removeOnComplete ?? true,
    removeOnFail: job.opts.removeOnFail ?? true,
  });
  // The losses count on (reclaim.ts MAX_REPLICA_LOSSES), wherever the job runs next.
  if (job.stalledCounter > 0) await redis.hset(to.toKey(id), "stc", job.stalledCounter);
}
