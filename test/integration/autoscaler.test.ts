/**
 * The autoscaler loop against real Redis and real BullMQ queues, with no
 * workers: demand is jobs nobody takes, so the counts are exact. Two scalers
 * run at once (in process, then as `platform scaler` processes): one acts,
 * and the other takes over when it dies.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type Autoscaler, startAutoscaler } from "../../scaler/autoscaler.ts";
import { Lease } from "../../src/redis/lease.ts";
import { AutoscalingSettings } from "../../src/autoscaling/config.ts";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import type { Endpoint } from "../../src/endpoints/record.ts";
import { autoscalingStatus, listDecisions, setAutoscaling } from "../../src/autoscaling/store.ts";
import type { RecordedDecision } from "../../src/autoscaling/decision.ts";
import { findEndpoint, saveEndpoint } from "../../src/endpoints/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { QueueBase } from "../../src/queue/base.ts";
import { workerDeploymentName } from "../../scaler/backends/endpoints/kubernetes-manifests.ts";
import { revisionId } from "../../src/endpoints/rollout.ts";
import { FakeKubernetesApi } from "../helpers/fake-kubernetes-api.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";
import { BIN } from "../helpers/stack.ts";
import { sleep, waitUntil } from "../helpers/wait.ts";

let server: PrivateRedis;
let REDIS_URL: string;
const PREFIX = `test-autoscaler-${randomUUID().slice(0, 8)}`;
const controls: Control[] = [];
const scalers: Autoscaler[] = [];
const children: ChildProcess[] = [];
const bases: QueueBase[] = [];

function control(): Control {
  const ctl = connectControl(REDIS_URL, PREFIX);
  controls.push(ctl);
  return ctl;
}

/** Producers of the jobs the scalers count, closed with the test file. */
function producer(c: Control): QueueBase {
  const base = new QueueBase(c);
  bases.push(base);
  return base;
}

let ctl: Control;
beforeAll(async () => {
  server = await privateRedis();
  REDIS_URL = server.url;
  ctl = control();
});

afterAll(async () => {
  for (const child of children) if (child.exitCode === null) child.kill("SIGKILL");
  for (const s of scalers) await s.stop().catch(() => undefined);
  for (const b of bases) await b.close();
  for (const c of controls) c.redis.disconnect();
  await server.stop();
});

async function deploy(name: string, desired: number): Promise<Endpoint> {
  const record: Endpoint = {
    name,
    config: DeploymentConfig.parse({ endpoint: name, model: { name, version: "v1" } }),
    version: "v1",
    framework: "llamacpp",
    desired_replicas: desired,
    created: Date.now(),
    updated: Date.now(),
  };
  await saveEndpoint(ctl, record);
  return record;
}

async function desired(name: string): Promise<number> {
  return (await findEndpoint(ctl, name))?.desired_replicas ?? -1;
}

const until = (check: () => Promise<boolean>, what: string | (() => string), timeoutMs = 30_000) =>
  waitUntil(what, check, { timeoutMs, intervalMs: 50 });

/** Oldest first: the order they were made in. */
async function decisions(name: string): Promise<RecordedDecision[]> {
  return (await listDecisions(ctl, name)).reverse();
}

const settings = (input: Record<string, unknown>) => AutoscalingSettings.parse(input);

describe("autoscaler loop", () => {
  it("scales one step per cooldown up to max, never past it; one of two scalers acts, the other takes over when it dies", async () => {
    await deploy("busy", 0);
    await deploy("manual", 2); // no autoscaling: left alone
    await setAutoscaling(
      ctl,
      "busy",
      settings({
        min_replicas: 0,
        max_replicas: 3,
        target_queue_depth: 2,
        scale_up_cooldown: "1s",
        scale_down_cooldown: "500ms",
        scale_down_delay: "1500ms",
      }),
    );
    const queue = producer(ctl).queue("busy", "v1");

    const a = await startAutoscaler(control(), {
      intervalMs: 100,
      leaseTtlMs: 1000,
      holderId: "scaler-a",
      log: () => undefined,
    });
    scalers.push(a);
    const b = await startAutoscaler(control(), {
      intervalMs: 100,
      leaseTtlMs: 1000,
      holderId: "scaler-b",
      log: () => undefined,
    });
    scalers.push(b);
    expect(a.isLeader()).toBe(true);
    expect(b.isLeader()).toBe(false);

    // 5 pending at 2 per replica needs 3 replicas; 25 would need 13, but max is 3.
    await queue.addBulk(Array.from({ length: 5 }, (_, i) => ({ name: "completion", data: { i } })));
    await until(async () => (await desired("busy")) === 3, "3 replicas");
    await queue.addBulk(Array.from({ length: 20 }, (_, i) => ({ name: "completion", data: { i } })));
    await until(async () => {
      const head = (await listDecisions(ctl, "busy", 1))[0];
      return head?.action === "hold" && head.from === 3 && head.repeats >= 10;
    }, "ten more ticks at 3 replicas");
    expect(await desired("busy")).toBe(3);

    const up = await decisions("busy");
    const scaleUps = up.filter((d) => d.action === "scale_up");
    expect(scaleUps.map((d) => [d.from, d.to])).toEqual([
      [0, 1],
      [1, 2],
      [2, 3],
    ]);
    expect(scaleUps[0]?.reason).toMatch(/scale from zero/);
    for (let i = 1; i < scaleUps.length; i++) {
      expect((scaleUps[i] as RecordedDecision).at - (scaleUps[i - 1] as RecordedDecision).at).toBeGreaterThanOrEqual(
        1000,
      );
    }
    expect(Math.max(...up.map((d) => d.to))).toBe(3);
    expect(up.at(-1)?.inputs).toEqual({ waiting: 25, active: 0, ready: 0, current: 3 });
    expect(up.at(-1)?.reason).toMatch(/queue 25 \(25 waiting, 0 active\)/);
    expect(new Set(up.map((d) => d.holder))).toEqual(new Set(["scaler-a"]));
    expect(await desired("manual")).toBe(2);
    expect(await listDecisions(ctl, "manual")).toEqual([]);

    // a dies without releasing its lease: b takes over once it expires, with a's history.
    await a.stop({ release: false });
    await until(async () => b.isLeader(), "b to take the lease");
    expect(await Lease.holder(ctl.redis, ctl.keys.scalerLease)).toBe("scaler-b");

    // Demand stops: after the delay, one step per down-cooldown, back to min 0.
    await queue.drain();
    const stoppedAt = Date.now();
    // The record follows the new count by a write: wait for both.
    await until(
      async () => (await desired("busy")) === 0 && (await listDecisions(ctl, "busy", 1))[0]?.to === 0,
      "0 replicas",
    );
    const all = await decisions("busy");
    const downs = all.filter((d) => d.action === "scale_down");
    expect(downs.map((d) => [d.from, d.to])).toEqual([
      [3, 2],
      [2, 1],
      [1, 0],
    ]);
    expect(new Set(downs.map((d) => d.holder))).toEqual(new Set(["scaler-b"]));
    const firstDown = downs[0] as RecordedDecision;
    const lastBusy = Math.max(...all.filter((d) => d.at < firstDown.at && d.needed >= 3).map((d) => d.at));
    expect(firstDown.at - lastBusy).toBeGreaterThanOrEqual(1500);
    expect(firstDown.at).toBeGreaterThanOrEqual(stoppedAt + 1500 - 200);
    for (let i = 1; i < downs.length; i++) {
      expect((downs[i] as RecordedDecision).at - (downs[i - 1] as RecordedDecision).at).toBeGreaterThanOrEqual(500);
    }
    expect(Math.min(...all.map((d) => d.to))).toBe(0);

    // A clean stop hands the lease back at once.
    await b.stop();
    expect(await Lease.holder(ctl.redis, ctl.keys.scalerLease)).toBeNull();
  });

  it("runs as `platform scaler` processes: only the lease holder decides; SIGKILL it and the other takes over", {
    timeout: 180_000,
  }, async () => {
    const prefix = `${PREFIX}-proc`;
    const pctl = connectControl(REDIS_URL, prefix);
    controls.push(pctl);
    const name = "idle";
    await saveEndpoint(pctl, endpointRecord(name, 0));
    await setAutoscaling(pctl, name, settings({ min_replicas: 0, max_replicas: 1 }));
    const dataDir = await mkdtemp(join(tmpdir(), "platform-scaler-"));
    const start = (id: string) => {
      const child = spawn(
        process.execPath,
        [BIN, "scaler", "--backend", "local", "--interval-ms", "100", "--lease-ttl-ms", "1000", "--holder-id", id],
        {
          env: { ...process.env, REDIS_URL, PLATFORM_PREFIX: prefix, PLATFORM_DATA_DIR: dataDir },
          stdio: ["ignore", "pipe", "pipe"],
        },
      );
      let out = "";
      child.stdout?.on("data", (d) => (out += d));
      child.stderr?.on("data", (d) => (out += d));
      children.push(child);
      return { child, output: () => out };
    };
    const p1 = start("proc-1");
    const p2 = start("proc-2");
    const holder = () => Lease.holder(pctl.redis, pctl.keys.scalerLease);
    await until(
      async () =>
        (await listDecisions(pctl, name)).length > 0 &&
        p1.output().includes("running") &&
        p2.output().includes("running"),
      "both scalers up and a decision",
      // Two processes starting on a loaded CI machine: the default 30 s ran out once.
      90_000,
    );
    const leader = (await holder()) as string;
    expect(["proc-1", "proc-2"]).toContain(leader);
    const [winner, standby] = leader === "proc-1" ? [p1, p2] : [p2, p1];
    const standbyId = leader === "proc-1" ? "proc-2" : "proc-1";
    await sleep(500); // a few ticks in which the standby must not act
    expect(new Set((await listDecisions(pctl, name)).map((d) => d.holder))).toEqual(new Set([leader]));
    expect(standby.output()).toMatch(/standing by/);

    winner.child.kill("SIGKILL");
    await until(async () => (await holder()) === standbyId, "the standby to take the lease");
    await until(
      async () => (await listDecisions(pctl, name, 1))[0]?.holder === standbyId,
      "a decision by the new holder",
    );
    expect(standby.output()).toContain(`${standbyId} holds the scaler lease`);

    const exited = new Promise<number | null>((resolve) => standby.child.once("exit", resolve));
    standby.child.kill("SIGTERM");
    expect(await exited).toBe(0);
    expect(await holder()).toBeNull();
    await rm(dataDir, { recursive: true, force: true });
    const keys = await pctl.redis.keys(`${prefix}:*`);
    if (keys.length > 0) await pctl.redis.del(...keys);
  });

  it("runs as `platform scaler --backend kubernetes`: scales the endpoint's Deployment through the API server", async () => {
    const prefix = `${PREFIX}-k8s`;
    const kctl = connectControl(REDIS_URL, prefix);
    controls.push(kctl);
    const api = new FakeKubernetesApi();
    const server = await api.start();
    const dir = await mkdtemp(join(tmpdir(), "platform-k8s-scaler-"));
    const kubeconfig = join(dir, "kubeconfig.yaml");
    await writeFile(
      kubeconfig,
      `apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: ${server}\n    insecure-skip-tls-verify: true\nusers:\n- name: scaler\n  user:\n    token: t\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: scaler\n    namespace: ml\ncurrent-context: fake\n`,
    );
    const name = "chat";
    const record = endpointRecord(name, 1);
    await saveEndpoint(kctl, record);
    await setAutoscaling(
      kctl,
      name,
      settings({ min_replicas: 1, max_replicas: 2, target_queue_depth: 1, scale_up_cooldown: "0s" }),
    );
    const queues = producer(kctl);
    const queue = queues.queue("chat", "v1");
    const child = spawn(process.execPath, [BIN, "scaler", "--backend", "kubernetes", "--interval-ms", "100"], {
      env: {
        ...process.env,
        REDIS_URL,
        PLATFORM_PREFIX: prefix,
        KUBECONFIG: kubeconfig,
        PLATFORM_WORKER_IMAGE: "example.com/platform:1",
        POD_NAMESPACE: "ml",
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    children.push(child);
    let out = "";
    child.stdout?.on("data", (d) => (out += d));
    child.stderr?.on("data", (d) => (out += d));
    const deployment = workerDeploymentName(name, "v1", revisionId(record));
    try {
      const scaledTo = (n: number) => async () => {
        if (child.exitCode !== null) throw new Error(`the scaler exited (${child.exitCode}): ${out}`);
        return api.deployment("ml", deployment)?.spec.replicas === n;
      };
      await until(scaledTo(1), () => `the Deployment created with 1 replica (scaler output: ${out})`);
      // Three waiting at 1 per replica: one step up, to max 2.
      await queue.addBulk(Array.from({ length: 3 }, (_, i) => ({ name: "completion", data: { i } })));
      await until(scaledTo(2), () => `the Deployment scaled to 2 (scaler output: ${out})`);
      expect(api.writes()).toEqual([
        `POST /apis/apps/v1/namespaces/ml/deployments`,
        `PATCH /apis/apps/v1/namespaces/ml/deployments/${deployment}/scale`,
      ]);
      expect(api.deployment("ml", deployment)?.spec.template.spec.containers[0].image).toBe("example.com/platform:1");
      expect(out).toMatch(/running with the kubernetes backend/);
      const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      expect(await exited).toBe(0);
      // Stopping the scaler leaves the cluster's Deployments alone.
      expect(api.deploymentNames("ml")).toEqual([deployment]);
    } finally {
      await queues.close();
      await api.close();
      await rm(dir, { recursive: true, force: true });
      const keys = await kctl.redis.keys(`${prefix}:*`);
      if (keys.length > 0) await kctl.redis.del(...keys);
    }
  });

  it("reads settings stored by the previous version, and reports a corrupt record once (log and status) instead of dropping it", async () => {
    const sctl = connectControl(REDIS_URL, `${PREFIX}-stored`);
    controls.push(sctl);
    for (const name of ["old", "broken"]) await saveEndpoint(sctl, endpointRecord(name, 0));
    // The document form ("30s") that versions before the parsed form wrote.
    await sctl.redis.set(
      sctl.keys.autoscaling("old"),
      JSON.stringify({
        enabled: true,
        min_replicas: 2,
        max_replicas: 3,
        target_queue_depth: 4,
        scale_up_cooldown: "30s",
        scale_down_cooldown: "1m",
        scale_down_delay: "5m",
      }),
    );
    const good = settings({ min_replicas: 1, max_replicas: 2 });
    await sctl.redis.set(sctl.keys.autoscaling("broken"), JSON.stringify({ ...good, min_replicas: "two" }));
    const lines: string[] = [];
    const scaler = await startAutoscaler(sctl, { intervalMs: 50, holderId: "stored", log: (l) => lines.push(l) });
    scalers.push(scaler);
    const depth = { waiting: 0, active: 0 };
    const patience = { timeout: 15_000, interval: 50 };
    const status = async (name: string) => autoscalingStatus(sctl, (await findEndpoint(sctl, name)) as Endpoint, depth);
    const about = (name: string) => lines.filter((l) => l.includes(`"${name}"`));

    await vi.waitFor(async () => expect((await findEndpoint(sctl, "old"))?.desired_replicas).toBe(2), patience);
    expect((await status("old")).config).toEqual({
      enabled: true,
      min_replicas: 2,
      max_replicas: 3,
      target_queue_depth: 4,
      scale_up_cooldown: "30s",
      scale_down_cooldown: "1m",
      scale_down_delay: "5m",
    });
    // Ten more ticks: the corrupt record is still told once.
    await vi.waitFor(
      async () => expect((await listDecisions(sctl, "old", 1))[0]?.repeats).toBeGreaterThanOrEqual(10),
      patience,
    );
    const told =
      '[scaler] the stored autoscaling settings of "broken" are unreadable (min_replicas: expected a number, got a string), so it is not autoscaled; apply them again: platform inference autoscale broken --config <file>';
    expect(about("broken")).toEqual([told]);
    expect(await listDecisions(sctl, "broken")).toEqual([]);
    expect((await findEndpoint(sctl, "broken"))?.desired_replicas).toBe(0);
    expect(await status("broken")).toMatchObject({
      configured: true,
      enabled: false,
      config: null,
      error: told.replace("[scaler] ", ""),
    });

    // Another corrupt record is told too; applying settings again mends it.
    await sctl.redis.set(sctl.keys.autoscaling("broken"), "{not json");
    await vi.waitFor(() => expect(about("broken")).toHaveLength(2), patience);
    expect(about("broken")[1]).toMatch(/"broken" are unreadable \(not a JSON object\)/);
    await setAutoscaling(sctl, "broken", good);
    // Stored as parsed: what the scaler reads back needs no second parse of the file's forms.
    expect(JSON.parse((await sctl.redis.get(sctl.keys.autoscaling("broken"))) ?? "")).toEqual(good);
    await vi.waitFor(async () => expect((await findEndpoint(sctl, "broken"))?.desired_replicas).toBe(1), patience);
    expect((await status("broken")).error).toBeNull();
    expect(about("broken")).toHaveLength(2);
    await scaler.stop();
  });
});

/** An endpoint record for model `name` at v1, as a deploy would write it. */
function endpointRecord(name: string, desired: number) {
  const now = Date.now();
  return {
    name,
    config: DeploymentConfig.parse({ endpoint: name, model: { name, version: "v1" } }),
    version: "v1",
    framework: "llamacpp" as const,
    desired_replicas: desired,
    created: now,
    updated: now,
  };
}
