/**
 * The fleet end to end on `platform up` (local backend, real workers, the tiny
 * model): autoscaling under load and from zero, admission control, failover
 * of killed replicas, and the `inference autoscale` CLI. Each test uses its
 * own registered model, so each endpoint has its own queue.
 */
import { writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { queueName } from "../../src/contracts/naming.ts";
import type { AutoscalingStatus, RecordedDecision } from "../../src/autoscaling/decision.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { LanesObserver } from "../helpers/queue-observer.ts";
import { type OwnStack, runCli, startStack } from "../helpers/stack.ts";
import { sleep } from "../helpers/wait.ts";
import { killBusyReplica } from "../helpers/processes.ts";

type Replica = { id: string; pid: number; state: string; in_flight: number };
type Status = {
  state: string;
  replicas: { ready: number; desired: number };
  replica_list: Replica[];
  queue: { waiting: number; active: number };
};
type ErrorBody = { error: { message: string; type: string; param: string | null; code: string | null } };

let stack: OwnStack;
let modelPath: string;

beforeAll(async () => {
  modelPath = await tinyModelPath({ contextLength: 4096 });
  // Models are registered from a server-local path, which must lie inside the storage roots.
  stack = await startStack({ args: ["--storage-root", dirname(modelPath)] });
});

afterAll(async () => {
  await stack?.stop();
});

async function endpoint(
  name: string,
  resources: Record<string, unknown>,
  autoscaling?: Record<string, unknown>,
): Promise<void> {
  const models = await stack.admin<{ data: { name: string }[] }>("GET", "/admin/v1/models");
  if (!models.body.data.some((m) => m.name === name)) {
    const reg = await stack.admin("POST", "/admin/v1/models", { name, framework: "llamacpp", source: modelPath });
    expect(reg.status, JSON.stringify(reg.body)).toBe(201);
  }
  const res = await stack.admin("PUT", `/admin/v1/endpoints/${name}`, {
    model: { name },
    resources,
    ...(autoscaling ? { autoscaling } : {}),
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

const status = async (name: string) => (await stack.admin<Status>("GET", `/admin/v1/endpoints/${name}`)).body;
const scaling = async (name: string) =>
  (await stack.admin<AutoscalingStatus>("GET", `/admin/v1/endpoints/${name}/autoscaling`)).body;
const remove = (name: string) => stack.admin("DELETE", `/admin/v1/endpoints/${name}`);
const running = (s: Status) => s.replica_list.filter((r) => r.state === "ready" || r.state === "starting");

function complete(model: string, prompt: string, maxTokens: number, extra: Record<string, unknown> = {}) {
  return fetch(`${stack.baseUrl}/v1/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model, prompt, max_tokens: maxTokens, temperature: 0, ...extra }),
  });
}

async function text(model: string, prompt: string, maxTokens: number): Promise<string> {
  const res = await complete(model, prompt, maxTokens);
  expect(res.status).toBe(200);
  return ((await res.json()) as { choices: { text: string }[] }).choices[0]?.text as string;
}

/** Oldest first. */
const chronological = (s: AutoscalingStatus) => [...s.decisions].reverse();

describe("admission control", () => {
  it("answers 503 with Retry-After when no replica is ready and none is coming", async () => {
    await endpoint("cold", { replicas: 0 });
    const res = await complete("cold", "hi", 3);
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("30");
    const body = (await res.json()) as ErrorBody;
    expect(body.error).toMatchObject({ type: "server_error", code: "no_capacity" });
    expect(body.error.message).toMatch(/scaled to zero and autoscaling is off/);
    await remove("cold");
  });

  it("answers 429 queue_full with Retry-After past max_queue_depth, and serves the rest", {
    timeout: 120_000,
  }, async () => {
    await endpoint("adm", { replicas: 1, parallel: 1, max_queue_depth: 2 });
    await stack.waitFor(async () => (await status("adm")).state === "available", "adm available");
    const responses = await Promise.all(Array.from({ length: 12 }, () => complete("adm", "Once upon a time", 600)));
    const codes = responses.map((r) => r.status);
    const rejected = responses.filter((r) => r.status === 429);
    expect(
      codes.every((c) => c === 200 || c === 429),
      codes.join(),
    ).toBe(true);
    expect(rejected.length).toBeGreaterThanOrEqual(1);
    expect(codes.filter((c) => c === 200).length).toBeGreaterThanOrEqual(1);
    for (const r of rejected) {
      expect(r.headers.get("retry-after")).toBe("2");
      const body = (await r.json()) as ErrorBody;
      expect(body.error).toMatchObject({ type: "rate_limit_error", code: "queue_full" });
      expect(body.error.message).toMatch(/max_queue_depth 2/);
    }
    for (const r of responses.filter((x) => x.status === 200)) {
      expect(((await r.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(600);
    }
    const metrics = await (await fetch(stack.metricsUrl)).text();
    expect(metrics).toContain(
      `platform_rate_limit_rejections_total{model_name="adm",version="v1",reason="queue_full"} ${rejected.length}`,
    );
  });

  it("answers 503 queue_timeout when a request waits past max_queue_wait, and withdraws it", {
    timeout: 120_000,
  }, async () => {
    // The limit drops to 500 ms first (gateways see endpoint changes within 2 s at most); then a long
    // request takes the only replica at once, and the next one waits behind it for seconds, past the limit.
    // (Lowering the limit while the long request ran made the test race the long request's end.)
    await endpoint("adm", { replicas: 1, parallel: 1, max_queue_wait: "500ms" });
    await sleep(2100);
    await stack.waitFor(async () => (await status("adm")).state === "available", "adm available");
    const long = complete("adm", "Once upon a time", 4000);
    await stack.waitFor(async () => (await status("adm")).queue.active === 1, "the long request to run");
    const res = await complete("adm", "Once upon a time", 5);
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("5");
    expect(((await res.json()) as ErrorBody).error).toMatchObject({ type: "server_error", code: "queue_timeout" });
    expect((await status("adm")).queue.waiting).toBe(0);
    expect((await long).status).toBe(200);
    await remove("adm");
  });
});

describe("inference autoscale CLI", () => {
  // Fourteen CLI processes: generous on a loaded machine.
  it("applies a file, shows status as a table and JSON, and rejects bad files naming the field", {
    timeout: 180_000,
  }, async () => {
    await endpoint("cli", { replicas: 1 });
    const dir = stack.dataDir;
    const good = join(dir, "autoscale.yaml");
    await writeFile(
      good,
      "endpoint: cli\nautoscaling:\n  enabled: true\n  min_replicas: 1\n  max_replicas: 2\n  target_queue_depth: 3\n  scale_up_cooldown: 30s\n  scale_down_cooldown: 1m\n  scale_down_delay: 90s\n",
    );
    const applied = await runCli(["inference", "autoscale", "cli", "--config", good], stack.env);
    expect(applied.code, applied.stderr).toBe(0);
    expect(applied.stdout).toContain(
      "autoscaling for cli: on, 1-2 replicas, target 3/replica, up 30s, down 1m, delay 90s",
    );

    await stack.waitFor(async () => (await scaling("cli")).decisions.length > 0, "a first decision");
    const table = await runCli(["inference", "autoscale", "status", "cli"], stack.env);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(/cli\s*│\s*on\s*│\s*1-2\s*│\s*3\s*│/);
    expect(table.stdout).toMatch(/time left: scale-up cooldown \S+, scale-down cooldown \S+, scale-down delay/);
    expect(table.stdout).toMatch(/scaler: \S+ \(holds the lease\)/);
    expect(table.stdout).toMatch(/recent decisions/);
    expect(table.stdout).toMatch(/hold.*within target 3 × 1 replicas: keep 1/);

    const json = JSON.parse(
      (await runCli(["inference", "autoscale", "status", "cli", "--json"], stack.env)).stdout,
    ) as AutoscalingStatus;
    expect(json).toMatchObject({
      endpoint: "cli",
      configured: true,
      enabled: true,
      replicas: { desired: 1 },
      queue: { waiting: 0, active: 0 },
    });
    expect(json.config).toEqual({
      enabled: true,
      min_replicas: 1,
      max_replicas: 2,
      target_queue_depth: 3,
      scale_up_cooldown: "30s",
      scale_down_cooldown: "1m",
      scale_down_delay: "90s",
    });
    expect(json.waits).toMatchObject({ scale_up_cooldown_ms: 0, scale_down_delay_ms: null });
    expect(json.scaler.holder).toBeTruthy();
    expect(json.decisions[0]).toMatchObject({ action: "hold", from: 1, to: 1, inputs: { waiting: 0, active: 0 } });

    const bad = join(dir, "bad.yaml");
    await writeFile(
      bad,
      "endpoint: cli\nautoscaling:\n  min_replicas: 3\n  max_replicas: 2\n  scale_up_cooldown: 30\n  colour: blue\n",
    );
    const rejected = await runCli(["inference", "autoscale", "cli", "--config", bad], stack.env);
    expect(rejected.code).toBe(2);
    expect(rejected.stderr).toContain('autoscaling.scale_up_cooldown: expected "<n>s"');
    expect(rejected.stderr).toContain('unknown field(s) "colour"');
    expect(rejected.stderr).toContain("min_replicas must be <= max_replicas (3 > 2)");

    const other = join(dir, "other.yaml");
    await writeFile(other, "endpoint: someone-else\nautoscaling:\n  max_replicas: 2\n");
    const mismatch = await runCli(["inference", "autoscale", "cli", "--config", other], stack.env);
    expect(mismatch.code).toBe(2);
    expect(mismatch.stderr).toMatch(/endpoint: "someone-else" does not match/);
    const missing = await runCli(["inference", "autoscale", "cli", "--config", join(dir, "nope.yaml")], stack.env);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/no such file/);
    const noFile = await runCli(["inference", "autoscale", "cli"], stack.env);
    expect(noFile.code).toBe(2);
    expect(noFile.stderr).toMatch(/--config <file>/);
    const noName = await runCli(["inference", "autoscale", "status"], stack.env);
    expect(noName.code).toBe(2);
    const unknown = await runCli(
      ["inference", "autoscale", "ghost", "--config", good.replace("autoscale.yaml", "ghost.yaml")],
      stack.env,
    );
    expect(unknown.code).toBe(2);
    await writeFile(join(dir, "ghost.yaml"), "autoscaling:\n  max_replicas: 2\n");
    const ghost = await runCli(["inference", "autoscale", "ghost", "--config", join(dir, "ghost.yaml")], stack.env);
    expect(ghost.code).toBe(1);
    expect(ghost.stderr).toMatch(/no endpoint named "ghost"/);

    // The same block inside a deployment file is applied at deploy time, and checked the same way.
    const deployFile = join(dir, "deploy.yaml");
    await writeFile(
      deployFile,
      "endpoint: cli\nmodel:\n  name: cli\nresources:\n  replicas: 1\nautoscaling:\n  min_replicas: 1\n  max_replicas: 3\n  scale_down_delay: 2m\n",
    );
    const deployed = await runCli(["inference", "deploy", "--config", deployFile], stack.env);
    expect(deployed.code, deployed.stderr).toBe(0);
    expect((await scaling("cli")).config).toMatchObject({ max_replicas: 3, scale_down_delay: "2m" });
    await writeFile(deployFile, "endpoint: cli\nmodel:\n  name: cli\nautoscaling:\n  max_replicas: 0\n");
    const badDeploy = await runCli(["inference", "deploy", "--config", deployFile], stack.env);
    expect(badDeploy.code).toBe(1);
    expect(badDeploy.stderr).toMatch(/autoscaling\.max_replicas: expected a whole number from 1 to 64/);
    await remove("cli");
  });
});

describe("autoscaling with real replicas", () => {
  it("rises one step per cooldown to max under load, never past it, then falls after the delay to min", {
    timeout: 180_000,
  }, async () => {
    const UP_MS = 1500;
    const DELAY_MS = 3000;
    await endpoint(
      "scale",
      { replicas: 1, parallel: 1 },
      {
        min_replicas: 1,
        max_replicas: 3,
        target_queue_depth: 1,
        scale_up_cooldown: `${UP_MS}ms`,
        scale_down_cooldown: "1s",
        scale_down_delay: `${DELAY_MS}ms`,
      },
    );
    await stack.waitFor(async () => (await status("scale")).state === "available", "scale available");

    // Eight clients, each sending its next request as soon as the last one is answered:
    // 8 pending at 1 per replica keeps the queue above target at any count up to max.
    let loading = true;
    let maxDesired = 0;
    let maxRunning = 0;
    // The endpoint keeps its last 50 decisions; on a loaded machine the climb can take more ticks
    // than that, so the test collects them as they are made (a repeated hold is updated in place).
    const seen = new Map<string, RecordedDecision>();
    const collect = async () => {
      for (const d of (await scaling("scale")).decisions) seen.set(`${d.action}:${d.from}:${d.since}`, d);
    };
    const clients = Array.from({ length: 8 }, async () => {
      while (loading) expect((await complete("scale", "Once upon a time", 200)).status).toBe(200);
    });
    const sampler = (async () => {
      while (loading) {
        const s = await status("scale");
        maxDesired = Math.max(maxDesired, s.replicas.desired);
        maxRunning = Math.max(maxRunning, running(s).length);
        await collect();
        await sleep(100);
      }
    })();
    await stack.waitFor(async () => (await status("scale")).replicas.ready === 3, "3 ready replicas", 90_000);
    // Another cooldown at max, load still above target: it must stay there.
    await sleep(UP_MS + 500);
    loading = false;
    await Promise.all(clients);
    await sampler;
    expect(maxDesired).toBe(3);
    expect(maxRunning).toBeLessThanOrEqual(3);

    await stack.waitFor(
      async () => {
        await collect();
        const s = await status("scale");
        return s.replicas.desired === 1 && running(s).length === 1;
      },
      "back to 1 replica",
      60_000,
    );
    await collect();
    const decisions = [...seen.values()].sort((a, b) => a.since - b.since);
    const ups = decisions.filter((d) => d.action === "scale_up");
    expect(ups.map((d) => [d.from, d.to])).toEqual([
      [1, 2],
      [2, 3],
    ]);
    expect((ups[1] as RecordedDecision).at - (ups[0] as RecordedDecision).at).toBeGreaterThanOrEqual(UP_MS);
    expect(Math.max(...decisions.map((d) => d.to))).toBe(3);
    const downs = decisions.filter((d) => d.action === "scale_down");
    expect(downs.map((d) => [d.from, d.to])).toEqual([
      [3, 2],
      [2, 1],
    ]);
    const firstDown = downs[0] as RecordedDecision;
    const lastBusy = Math.max(...decisions.filter((d) => d.at < firstDown.at && d.needed >= 3).map((d) => d.at));
    expect(firstDown.at - lastBusy).toBeGreaterThanOrEqual(DELAY_MS);
    expect(firstDown.reason).toMatch(/scale_down_delay/);
    await remove("scale");
  });

  it("scales from zero for the first request, serves it, and returns to zero after the delay", {
    timeout: 120_000,
  }, async () => {
    await endpoint(
      "zero",
      { replicas: 0, parallel: 1 },
      { min_replicas: 0, max_replicas: 1, scale_up_cooldown: "1s", scale_down_cooldown: "1s", scale_down_delay: "2s" },
    );
    expect((await status("zero")).state).toBe("scaled_to_zero");
    const res = await complete("zero", "Once upon a time", 12);
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      choices: { text: string; finish_reason: string }[];
      usage: { completion_tokens: number };
    };
    expect(body.usage.completion_tokens).toBe(12);
    await endpoint("ref", { replicas: 1 });
    expect(body.choices[0]?.text).toBe(await text("ref", "Once upon a time", 12));
    await remove("ref");
    await stack.waitFor(
      async () => {
        const s = await status("zero");
        return s.replicas.desired === 0 && s.replica_list.length === 0;
      },
      "back to zero replicas",
      60_000,
    );
    const decisions = chronological(await scaling("zero"));
    expect(decisions.filter((d) => d.action !== "hold").map((d) => [d.action, d.from, d.to])).toEqual([
      ["scale_up", 0, 1],
      ["scale_down", 1, 0],
    ]);
    expect(decisions.find((d) => d.action === "scale_up")?.reason).toMatch(/scale from zero/);
    await remove("zero");
  });
});

describe("failover", () => {
  it("answers 100 concurrent requests correctly when one of two replicas is SIGKILLed mid-way: none lost, none duplicated", {
    timeout: 180_000,
  }, async () => {
    await endpoint("fo", { replicas: 2, parallel: 4 });
    await stack.waitFor(async () => (await status("fo")).replicas.ready === 2, "2 ready replicas");
    const prompts = ["Once upon a time", "The little dog", "Lily and Tom went"];
    // Each request asks for its own number of tokens, so the engine's result (on the queue's own
    // event stream) says which request it answered; greedy decoding makes every answer a prefix
    // of its prompt's longest answer.
    const tokensFor = (i: number) => 60 + i;
    const longest = new Map<string, string>();
    for (const p of prompts) longest.set(p, await text("fo", p, tokensFor(99)));
    // Engine-side executions per job, seen from outside the gateway: `active` each time a replica
    // takes the job, `completed` (with the result) each time one finishes it.
    // The replicas' lanes too (src/queue/lanes.ts): a job may run from one, or move to the shared queue.
    const observer = await LanesObserver.start(stack.redisUrl, "platform", queueName("fo", "v1"), { keepLog: true });

    let answered = 0;
    const requests = Array.from({ length: 100 }, async (_, i) => {
      const prompt = prompts[i % prompts.length] as string;
      const res = await complete("fo", prompt, tokensFor(i));
      const body = (await res.json()) as {
        choices: { text: string }[];
        usage: { completion_tokens: number };
      } & Partial<ErrorBody>;
      answered++;
      return { i, prompt, status: res.status, body };
    });
    // Early, with most of the work still queued: a replica in_flight at its last heartbeat is surely
    // still busy when it is killed (a later kill could land after it drained its share).
    await stack.waitFor(async () => answered >= 2, "the first answers");
    // The busier of the two: prompts go to their prefix's replica, and the other may hold only a
    // spilled job or two, done by the time it is killed on a loaded machine (seen with 3 busy loops beside).
    const busy = await (async () => {
      for (;;) {
        const ready = (await status("fo")).replica_list.filter((r) => r.state === "ready" && r.in_flight > 0);
        const victim = ready.sort((a, b) => b.in_flight - a.in_flight)[0];
        if (victim) return victim;
        await sleep(20);
      }
    })();
    process.kill(busy.pid, "SIGKILL");
    const results = await Promise.all(requests);
    // A replica killed between sending an answer and telling BullMQ leaves that job to run again
    // elsewhere after its client was answered: wait for those completions too.
    await stack.waitFor(async () => {
      expect((await observer.drain()).lost).toBe(0);
      const taken = observer.takenJobIds();
      return taken.length === 100 && taken.every((id) => observer.count(id, "completed") >= 1);
    }, "every job's completion");
    await observer.stop();

    // Every request answered once, with a correct answer of its own length.
    expect(results.map((r) => r.status)).toEqual(Array(100).fill(200));
    for (const r of results) {
      expect(r.body.usage.completion_tokens).toBe(tokensFor(r.i));
      expect(longest.get(r.prompt)?.startsWith(r.body.choices[0]?.text as string), `request ${r.i}`).toBe(true);
    }
    // Engine side: 100 jobs, each completed exactly once, whichever replica ran it.
    const jobs = observer.takenJobIds();
    const completed = observer.events().filter((e) => e.event === "completed" && jobs.includes(e.jobId));
    expect(jobs).toHaveLength(100);
    for (const id of jobs) expect(observer.count(id, "completed"), `job ${id}`).toBe(1);
    expect(completed).toHaveLength(100);
    // Each completion is one request's: the 100 token counts asked for, each once. What BullMQ keeps
    // of it on the queue's event stream has no text: the answer went to its client alone (JobReceipt).
    const receipts = completed.map(
      (e) => JSON.parse(e.returnvalue as string) as { text?: string; usage: { completion_tokens: number } },
    );
    const byNumber = (a: number, b: number) => a - b;
    expect(receipts.map((r) => r.usage.completion_tokens).sort(byNumber)).toEqual(
      results.map((r) => tokensFor(r.i)).sort(byNumber),
    );
    expect(receipts.filter((r) => "text" in r)).toEqual([]);
    // A job is taken again only when its replica died holding it: every extra `active` is matched by a
    // `requeued` (up's supervisor taking the dead replica's jobs back as it exits), so no live replica ran
    // a job another one had; and the supervisor was first, before any lock could lapse (`stalled`).
    for (const id of jobs) expect(observer.count(id, "active"), `job ${id}`).toBe(1 + observer.count(id, "requeued"));
    expect(jobs.filter((id) => observer.count(id, "stalled") > 0)).toEqual([]);
    // The kill did catch jobs in flight, and no more than the victim could hold (parallel 4: its 4
    // sequences and one prefetched job from the shared queue, and one per sequence from its lane).
    const retaken = jobs.filter((id) => observer.count(id, "active") > 1).length;
    expect(retaken).toBeGreaterThanOrEqual(1);
    expect(retaken).toBeLessThanOrEqual(9);
    expect(stack.output()).toMatch(/exited \(SIGKILL\); replacing it/);
    expect(stack.output()).toMatch(/replica fo-\w+: \d+ job\(s\) back in the queue/);
    // The replacement is made of the standby worker `up` keeps loaded, not a new process.
    expect(stack.output()).toMatch(/replica fo-\w+ starting \(pid \d+, from the standby worker/);
    await stack.waitFor(async () => (await status("fo")).replicas.ready === 2, "the killed replica replaced");
    await remove("fo");
  });

  it("a stream survives its replica: SIGKILLed mid-stream, the client's greedy answer is byte for byte the uninterrupted one", {
    timeout: 120_000,
  }, async () => {
    await endpoint("st", { replicas: 2, parallel: 1 });
    await stack.waitFor(async () => (await status("st")).replicas.ready === 2, "2 ready replicas");
    const events = (raw: string) =>
      raw
        .split("\n\n")
        .filter((e) => e.startsWith("data: "))
        .map((e) => e.slice(6));
    const textOf = (data: string[]) =>
      data
        .filter((d) => d !== "[DONE]")
        .map((d) => (JSON.parse(d) as { choices: { text: string }[] }).choices[0]?.text ?? "")
        .join("");
    // The uninterrupted answer from an endpoint of its own (the same model): on "st" it would leave
    // the prompt in a replica's cache, and a prompt evaluated from a cache (one token) is not
    // bit-for-bit the one evaluated whole, which the killed stream's replacement does.
    await endpoint("st-ref", { replicas: 1, parallel: 1 });
    await stack.waitFor(async () => (await status("st-ref")).replicas.ready === 1, "the reference's replica");
    const uninterrupted = events(await (await complete("st-ref", "Once upon a time", 3000, { stream: true })).text());
    expect(uninterrupted.at(-1)).toBe("[DONE]");
    await remove("st-ref");

    const res = await complete("st", "Once upon a time", 3000, { stream: true });
    expect(res.status).toBe(200);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let raw = "";
    while (!raw.includes('"text":"') || !/"text":"[^"]+"/.test(raw)) raw += decoder.decode((await reader.read()).value);
    raw += await killBusyReplica(async () => (await status("st")).replica_list.find((x) => x.in_flight > 0), reader);
    const data = events(raw);
    expect(data.filter((d) => d.includes('"error"'))).toEqual([]);
    expect(data.at(-1)).toBe("[DONE]");
    // Killed mid-stream for real: the replica was replaced, and its job was taken back.
    await stack.waitFor(async () => /exited \(SIGKILL\); replacing it/.test(stack.output()), "the kill noticed");
    expect(stack.output()).toMatch(/replica st-\w+: 1 job\(s\) back in the queue/);
    expect(textOf(data)).toBe(textOf(uninterrupted));
    expect(textOf(data).length).toBeGreaterThan(100);
  });

  it("answers 502 replica_lost, not a hang, when a job's replicas die twice (BullMQ fails it)", {
    timeout: 120_000,
  }, async () => {
    await stack.waitFor(async () => {
      const s = await status("st");
      return (
        s.replicas.ready === 2 &&
        s.replica_list.every((r) => r.in_flight === 0) &&
        s.queue.waiting + s.queue.active === 0
      );
    }, "2 idle ready replicas");
    const pending = complete("st", "Once upon a time", 3000);
    const killed = new Set<number>();
    for (let round = 0; round < 2; round++) {
      const victim = await (async () => {
        for (;;) {
          const r = (await status("st")).replica_list.find((x) => x.in_flight > 0 && !killed.has(x.pid));
          if (r) return r;
          await sleep(20);
        }
      })();
      killed.add(victim.pid);
      process.kill(victim.pid, "SIGKILL");
    }
    const res = await pending;
    expect(res.status).toBe(502);
    expect(((await res.json()) as ErrorBody).error).toMatchObject({ type: "server_error", code: "replica_lost" });
    await remove("st");
  });
});
