/**
 * Updates that change what replicas load (the version, quantization, dtype, context length, the
 * draft, the engine, the replicas' resources) roll out: the new revision's replicas start beside
 * the serving ones, traffic moves once they are all ready, and the previous revision's replicas
 * drain what their queue still holds before they stop. An update that changes only the platform's
 * own settings (replicas, queue limits) applies at once. The decisions are pure functions of the
 * record and what the scaler observed (docs/fleet.md, "Updates").
 */
import { createHash } from "node:crypto";
import { endpointQueueName } from "../contracts/engines.ts";
import type { Replica } from "../replicas/record.ts";
import { type Endpoint, MAX_DRAINING, type Revision } from "./record.ts";

/**
 * How long a drained revision stays after traffic left it before its empty queue counts: a
 * gateway routes by records at most 2 s old (src/gateway/routing.ts), so a request may still
 * reach the old queue that long after the switch.
 */
export const DRAIN_GRACE_MS = 5_000;

/** The fields of a revision its replicas load, hashed: a change to any of them is a rollout. */
export function revisionId(r: Revision): string {
  const { model, runtime, resources } = r.config;
  const loaded = {
    model: model.name,
    version: r.version,
    framework: r.framework,
    runtime,
    resources: {
      gpu: resources.gpu,
      gpu_type: resources.gpu_type,
      memory: resources.memory,
      cpu: resources.cpu,
      parallel: resources.parallel,
    },
  };
  return createHash("sha256").update(canonical(loaded)).digest("hex").slice(0, 10);
}

/** JSON with sorted keys and no undefined fields: the same deployment always hashes the same. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value).filter(([, v]) => v !== undefined);
    entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

function revisionOf(e: Revision): Revision {
  return { config: e.config, version: e.version, framework: e.framework };
}

/**
 * The endpoint as `rev`'s replicas run it: the model, runtime and replica resources of `rev`; the
 * endpoint's own replica count, queue limits and the rest.
 */
export function revisionView(e: Endpoint, rev: Revision): Endpoint {
  const own = e.config.resources;
  return {
    ...e,
    version: rev.version,
    framework: rev.framework,
    config: {
      ...e.config,
      model: rev.config.model,
      runtime: rev.config.runtime,
      resources: {
        ...rev.config.resources,
        replicas: own.replicas,
        max_queue_depth: own.max_queue_depth,
        max_queue_wait: own.max_queue_wait,
      },
    },
  };
}

/** What serves the endpoint's traffic: the previous revision while an update rolls out, else the endpoint. */
export function serving(e: Endpoint): Endpoint {
  return e.rollout ? revisionView(e, e.rollout.from) : e;
}

/** The endpoint's queue for its traffic (and for batch records sent to it). */
export function servingQueue(e: Endpoint): string {
  return endpointQueueName(serving(e));
}

/** Whether a replica serves the endpoint's traffic (replicas of older releases say only their version). */
export function servesTraffic(r: Replica, e: Endpoint): boolean {
  return r.queue === undefined ? r.version === serving(e).version : r.queue === servingQueue(e);
}

export type RunningRevision = { id: string; view: Endpoint; replicas: number };

/**
 * Every revision of the endpoint that has replicas, with how many it wants: the endpoint's own
 * (`wanted`), the one serving while an update rolls out (as many, so capacity holds), and those
 * draining (the replicas they had).
 */
export function runningRevisions(e: Endpoint, wanted: number): RunningRevision[] {
  const out = new Map<string, RunningRevision>();
  const add = (rev: Revision, replicas: number) => {
    const id = revisionId(rev);
    const known = out.get(id);
    if (known) known.replicas = Math.max(known.replicas, replicas);
    else out.set(id, { id, view: revisionView(e, rev), replicas });
  };
  add(e, wanted);
  if (e.rollout) add(e.rollout.from, wanted);
  for (const d of e.draining ?? []) add(d, d.replicas);
  return [...out.values()];
}

/** The endpoint as revision `id` runs it; undefined when it runs no such revision any more. */
export function findRevision(e: Endpoint, id: string): Endpoint | undefined {
  return runningRevisions(e, e.desired_replicas).find((r) => r.id === id)?.view;
}

/**
 * A deployment over an existing endpoint. When it changes what replicas load it becomes a rollout
 * from what serves now; a deployment of what serves now ends a rollout in progress. A revision
 * left behind (a rollout replaced or undone) drains its queue like any other.
 */
export function withUpdate(existing: Endpoint | undefined, next: Endpoint, now: number): Endpoint {
  if (!existing) return next;
  const nextId = revisionId(next);
  // The same update again (or a change of replicas or queue limits meanwhile): its rollout goes on.
  if (existing.rollout && revisionId(existing) === nextId) {
    return { ...next, rollout: existing.rollout, draining: existing.draining };
  }
  const servingRevision = existing.rollout?.from ?? revisionOf(existing);
  let draining = existing.draining ?? [];
  const leaving = existing.rollout ? revisionOf(existing) : undefined;
  if (leaving && revisionId(leaving) !== nextId) {
    draining = withDraining(draining, leaving, 0, now);
  }
  const update = { ...next, draining: draining.length > 0 ? draining : undefined };
  if (revisionId(servingRevision) === nextId) return { ...update, rollout: undefined };
  return { ...update, rollout: { from: servingRevision, started: now } };
}

function withDraining(list: NonNullable<Endpoint["draining"]>, rev: Revision, replicas: number, now: number) {
  const id = revisionId(rev);
  const others = list.filter((d) => revisionId(d) !== id);
  const kept = list.find((d) => revisionId(d) === id);
  return [...others, { ...revisionOf(rev), replicas: Math.max(replicas, kept?.replicas ?? 0), since: now }].slice(
    -MAX_DRAINING,
  );
}

export type RolloutObservation = {
  /** The endpoint's live replicas (heartbeats), whatever their revision. */
  replicas: Replica[];
  /** Waiting and active jobs of a queue (status.ts `readQueueDepth`). */
  depth: (queue: string) => Promise<{ waiting: number; active: number }>;
  now: number;
};

/**
 * One step of the endpoint's rollout and drains, as the scaler takes it each tick: the new record
 * when something changed (with a line saying what), else undefined.
 */
export async function rolloutStep(
  e: Endpoint,
  o: RolloutObservation,
): Promise<{ next: Endpoint; event: string } | undefined> {
  const of = (id: string) => o.replicas.filter((r) => r.revision === id);
  let next = e;
  const events: string[] = [];
  if (e.rollout) {
    const target = of(revisionId(e));
    const ready = target.filter((r) => r.state === "ready").length;
    if (ready >= e.desired_replicas) {
      const fromId = revisionId(e.rollout.from);
      const live = of(fromId).filter((r) => r.state !== "failed").length;
      next = { ...e, rollout: undefined, draining: withDraining(e.draining ?? [], e.rollout.from, live, o.now) };
      events.push(`rolled out ${describe(e.rollout.from)} → ${describe(e)}; ${fromId} drains its queue`);
    } else {
      const failure = ready === 0 ? target.find((r) => r.state === "failed") : undefined;
      const failed = failure ? (failure.error ?? "the replica failed to start") : undefined;
      if (failed !== e.rollout.failed) {
        next = { ...e, rollout: { ...e.rollout, failed } };
        events.push(
          failed
            ? `update to ${describe(e)} failed (${failed}); ${describe(e.rollout.from)} keeps serving`
            : `update to ${describe(e)}: replicas starting again`,
        );
      }
    }
  }
  const draining: NonNullable<Endpoint["draining"]> = [];
  const traffic = servingQueue(next);
  for (const d of next.draining ?? []) {
    const queue = endpointQueueName(revisionView(next, d));
    // Same queue as the traffic: the serving replicas take what is left, and these drain what they hold.
    if (queue === traffic) continue;
    const depth = await o.depth(queue);
    const empty = depth.waiting + depth.active === 0;
    if (empty && o.now - d.since >= DRAIN_GRACE_MS) continue;
    // Requests wait where no replica is left to take them (it died, or there was none): one is started.
    const alive = of(revisionId(d)).some((r) => r.state !== "failed");
    draining.push(!empty && !alive && d.replicas === 0 ? { ...d, replicas: 1 } : d);
  }
  const before = next.draining ?? [];
  if (draining.length !== before.length || draining.some((d, i) => d !== before[i])) {
    for (const d of before) {
      if (!draining.some((k) => revisionId(k) === revisionId(d))) events.push(`${revisionId(d)} drained`);
    }
    next = { ...next, draining: draining.length > 0 ? draining : undefined };
  }
  if (next === e) return undefined;
  return { next: { ...next, updated: o.now }, event: `${e.name}: ${events.join("; ")}` };
}

function describe(r: Revision): string {
  return `${r.config.model.name}@${r.version} (${revisionId(r)})`;
}
