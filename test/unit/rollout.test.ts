/** Updates that change what replicas load roll out (src/endpoints/rollout.ts): the decisions, on simulated replicas and queues. */
import { describe, expect, it } from "vitest";
import { DeploymentConfig, type DeploymentConfigInput } from "../../src/contracts/deployment.ts";
import { endpointQueueName } from "../../src/contracts/engines.ts";
import { Endpoint, type QueueDepth } from "../../src/endpoints/record.ts";
import {
  DRAIN_GRACE_MS,
  findRevision,
  revisionId,
  rolloutStep,
  runningRevisions,
  serving,
  servingQueue,
  withUpdate,
} from "../../src/endpoints/rollout.ts";
import type { Replica } from "../../src/replicas/record.ts";

function endpoint(config: Partial<DeploymentConfigInput> = {}, version = "v1"): Endpoint {
  return Endpoint.parse({
    name: "chat",
    config: DeploymentConfig.parse({ endpoint: "chat", model: { name: "stories", version }, ...config }),
    version,
    framework: "llamacpp",
    desired_replicas: config.resources?.replicas ?? 1,
    created: 0,
    updated: 0,
  });
}

const int8 = endpoint({ runtime: { quantization: "int8" } });

function replica(e: Endpoint, state: Replica["state"], error?: string): Replica {
  return {
    id: `r-${Math.random()}`,
    endpoint: e.name,
    model: e.config.model.name,
    version: e.version,
    state,
    pid: 1,
    host: "h",
    started: 0,
    heartbeat: 0,
    in_flight: 0,
    parallel: 4,
    revision: revisionId(e),
    queue: endpointQueueName(e),
    ...(error ? { error } : {}),
  };
}

const empty: QueueDepth = { waiting: 0, active: 0 };
const depths =
  (byQueue: Record<string, QueueDepth> = {}) =>
  async (queue: string) =>
    byQueue[queue] ?? empty;

describe("revisions", () => {
  it("a change to what replicas load is a new revision; replicas and queue limits are not", () => {
    const base = endpoint();
    expect(revisionId(endpoint({ resources: { replicas: 3, max_queue_depth: 10, max_queue_wait: "5s" } }))).toBe(
      revisionId(base),
    );
    for (const changed of [
      int8,
      endpoint({ runtime: { max_model_len: 128 } }),
      endpoint({ resources: { parallel: 2 } }),
      endpoint({}, "v2"),
    ]) {
      expect(revisionId(changed)).not.toBe(revisionId(base));
    }
    // The same deployment hashes the same whatever the order its fields were written in.
    const reordered = { ...base, config: { ...base.config, runtime: { dtype: "auto" as const, max_model_len: 64 } } };
    const ordered = { ...base, config: { ...base.config, runtime: { max_model_len: 64, dtype: "auto" as const } } };
    expect(revisionId(reordered)).toBe(revisionId(ordered));
  });
});

describe("an update", () => {
  it("that changes only replicas or queue limits applies at once", () => {
    const next = withUpdate(endpoint(), endpoint({ resources: { replicas: 2 } }), 5);
    expect(next.rollout).toBeUndefined();
    expect(next.desired_replicas).toBe(2);
  });

  it("that changes what replicas load rolls out, the previous deployment serving meanwhile", () => {
    const before = endpoint();
    const next = withUpdate(before, int8, 5);
    expect(next.rollout).toMatchObject({ from: { version: "v1" }, started: 5 });
    expect(revisionId(next.rollout!.from)).toBe(revisionId(before));
    // Traffic stays where it was until the new replicas are ready.
    expect(servingQueue(next)).toBe(endpointQueueName(before));
    expect(endpointQueueName(next)).toBe(endpointQueueName(int8));
    expect(serving(next).config.runtime.quantization).toBeUndefined();
    // Both run: the update's replicas and, at full strength, the serving ones.
    expect(runningRevisions(next, 2).map((r) => [r.id, r.replicas])).toEqual([
      [revisionId(int8), 2],
      [revisionId(before), 2],
    ]);
    expect(findRevision(next, revisionId(before))?.config.runtime.quantization).toBeUndefined();
    expect(findRevision(next, revisionId(int8))?.config.runtime.quantization).toBe("int8");
    expect(findRevision(next, "nope")).toBeUndefined();
  });

  it("deployed again while it rolls out keeps its rollout; a third revision replaces it; the serving one undoes it", () => {
    const rolling = withUpdate(endpoint(), int8, 5);
    expect(
      withUpdate(rolling, endpoint({ runtime: { quantization: "int8" }, resources: { replicas: 2 } }), 9),
    ).toMatchObject({ rollout: { started: 5 }, desired_replicas: 2 });
    const int4 = endpoint({ runtime: { quantization: "int4" } });
    const replaced = withUpdate(rolling, int4, 9);
    expect(revisionId(replaced.rollout!.from)).toBe(revisionId(endpoint()));
    // The abandoned update drains whatever reached its queue.
    expect(replaced.draining?.map(revisionId)).toEqual([revisionId(int8)]);
    const undone = withUpdate(rolling, endpoint(), 9);
    expect(undone.rollout).toBeUndefined();
    expect(undone.draining?.map(revisionId)).toEqual([revisionId(int8)]);
  });
});

describe("the scaler's rollout step", () => {
  const rolling = withUpdate(endpoint(), int8, 0);
  const old = endpoint();

  it("waits while the update's replicas start", async () => {
    const replicas = [replica(old, "ready"), replica(int8, "starting")];
    expect(await rolloutStep(rolling, { replicas, depth: depths(), now: 1 })).toBeUndefined();
  });

  it("says why the update's replicas cannot start, while the previous ones serve", async () => {
    const replicas = [replica(old, "ready"), replica(int8, "failed", "runtime.quantization: cannot be loaded")];
    const step = await rolloutStep(rolling, { replicas, depth: depths(), now: 1 });
    expect(step?.next.rollout?.failed).toBe("runtime.quantization: cannot be loaded");
    expect(servingQueue(step!.next)).toBe(endpointQueueName(old));
    expect(step?.event).toMatch(/failed.*keeps serving/);
  });

  it("moves traffic once every wanted replica of the update is ready; the previous revision drains", async () => {
    const replicas = [replica(old, "ready"), replica(int8, "ready")];
    const step = await rolloutStep(rolling, { replicas, depth: depths(), now: 10 });
    expect(step?.next.rollout).toBeUndefined();
    expect(servingQueue(step!.next)).toBe(endpointQueueName(int8));
    expect(step?.next.draining).toEqual([expect.objectContaining({ version: "v1", replicas: 1, since: 10 })]);
    // The drained revision's replicas keep running until the record lets them go.
    expect(runningRevisions(step!.next, 1).map((r) => r.id)).toEqual([revisionId(int8), revisionId(old)]);
  });

  it("lets a drained revision go once its queue is empty, never within the grace a stale gateway may still route in", async () => {
    const promoted = (await rolloutStep(rolling, {
      replicas: [replica(old, "ready"), replica(int8, "ready")],
      depth: depths(),
      now: 10,
    }))!.next;
    const replicas = [replica(old, "ready"), replica(int8, "ready")];
    const oldQueue = endpointQueueName(old);
    expect(await rolloutStep(promoted, { replicas, depth: depths(), now: 10 + DRAIN_GRACE_MS - 1 })).toBeUndefined();
    const busy = depths({ [oldQueue]: { waiting: 2, active: 1 } });
    expect(await rolloutStep(promoted, { replicas, depth: busy, now: 10 + DRAIN_GRACE_MS })).toBeUndefined();
    const done = await rolloutStep(promoted, { replicas, depth: depths(), now: 10 + DRAIN_GRACE_MS });
    expect(done?.next.draining).toBeUndefined();
    expect(runningRevisions(done!.next, 1).map((r) => r.id)).toEqual([revisionId(int8)]);
  });

  it("starts a replica for a drained queue that still holds requests and has none left", async () => {
    const drained = {
      ...int8,
      draining: [{ config: old.config, version: "v1", framework: "llamacpp" as const, replicas: 0, since: 0 }],
    };
    const busy = depths({ [endpointQueueName(old)]: { waiting: 1, active: 0 } });
    const step = await rolloutStep(drained, {
      replicas: [replica(int8, "ready")],
      depth: busy,
      now: DRAIN_GRACE_MS * 2,
    });
    expect(step?.next.draining?.[0]?.replicas).toBe(1);
  });

  it("lets a revision that shares the serving queue go at once: the serving replicas take what it holds", async () => {
    const moreSequences = endpoint({ resources: { parallel: 8 } });
    expect(endpointQueueName(moreSequences)).toBe(endpointQueueName(old));
    const promoted = { ...moreSequences, draining: [{ ...old, replicas: 1, since: 0 }] };
    const busy = depths({ [endpointQueueName(old)]: { waiting: 5, active: 4 } });
    const step = await rolloutStep(promoted, { replicas: [replica(old, "ready")], depth: busy, now: 1 });
    expect(step?.next.draining).toBeUndefined();
  });
});
