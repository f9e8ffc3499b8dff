/**
 * Updating a running endpoint on `platform up` (src/endpoints/rollout.ts): an update that changes
 * what replicas load rolls out while clients keep calling, with every request answered; one whose
 * replicas cannot start leaves the previous deployment serving, and status says why.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tinyModelPath } from "../helpers/models.ts";
import { undeploy } from "../helpers/deploy.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import { runCli, type Stack, waitAvailable } from "../helpers/stack.ts";
import { sleep } from "../helpers/wait.ts";

type Replica = { id: string; state: string; version: string; revision?: string; queue?: string };
type Status = {
  state: string;
  replicas: { ready: number; desired: number };
  replica_list: Replica[];
  queue: { waiting: number; active: number };
  rollout?: { from: { revision: string; queue: string }; to: { revision: string; queue: string }; failed?: string };
  draining_revisions?: unknown[];
};

const NAME = unique("roll");
let stack: Stack;

beforeAll(async () => {
  const modelPath = await tinyModelPath({ contextLength: 4096 });
  stack = await sharedStack();
  const reg = await stack.admin("POST", "/admin/v1/models", { name: NAME, framework: "llamacpp", source: modelPath });
  expect(reg.status, JSON.stringify(reg.body)).toBe(201);
  expect((await deploy({})).status).toBe(200);
  await waitAvailable(stack, NAME);
});

afterAll(() => undeploy(stack, NAME));

/** What `inference deploy --model roll [--quantization ...]` sends, with `runtime` as given. */
const deploy = (runtime: Record<string, unknown>) =>
  stack.admin("PUT", `/admin/v1/endpoints/${NAME}`, { model: { name: NAME }, runtime });
const status = async () => (await stack.admin<Status>("GET", `/admin/v1/endpoints/${NAME}`)).body;

/** Clients calling in a loop until stopped, every answer counted: a request not answered in 30 s counts as hung. */
function load(clients: number) {
  const counts = { ok: 0, failed: [] as string[], hung: 0 };
  let running = true;
  const client = async () => {
    while (running) {
      try {
        const res = await fetch(`${stack.baseUrl}/v1/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
          body: JSON.stringify({ model: NAME, prompt: "Once upon a time", max_tokens: 4, temperature: 0 }),
          signal: AbortSignal.timeout(30_000),
        });
        const body = await res.text();
        if (res.status === 200) counts.ok++;
        else counts.failed.push(`${res.status} ${body}`);
      } catch (e) {
        if ((e as Error).name === "TimeoutError") counts.hung++;
        else counts.failed.push(String(e));
      }
    }
  };
  const done = Promise.all(Array.from({ length: clients }, client));
  return {
    counts,
    stop: async () => {
      running = false;
      await done;
      return counts;
    },
  };
}

describe("updating an endpoint", () => {
  it("rolls out a change of quantization while clients call, answering every request", {
    timeout: 180_000,
  }, async () => {
    const before = await status();
    const traffic = load(3);
    // Everything status says while the update rolls out.
    const seen: Status[] = [];
    let watching = true;
    const watch = (async () => {
      while (watching) {
        seen.push(await status());
        await sleep(50);
      }
    })();
    // The clients are answered before the update starts.
    await expect.poll(() => traffic.counts.ok).toBeGreaterThanOrEqual(3);
    const deployed = await runCli(["inference", "deploy", "--model", NAME, "--quantization", "int8"], stack.env);
    expect(deployed.code, deployed.stderr).toBe(0);
    expect(deployed.stdout).toContain(`rolling out: its replicas start beside those of ${NAME}@v1`);

    await stack.waitFor(
      async () => {
        const s = await status();
        return (
          s.state === "available" && !s.draining_revisions && s.replica_list.every((r) => r.queue?.includes("~int8"))
        );
      },
      "the update to take the traffic and the previous replicas to drain",
      120_000,
    );
    // And are answered by the new replicas alone.
    const answered = traffic.counts.ok;
    await expect.poll(() => traffic.counts.ok).toBeGreaterThanOrEqual(answered + 3);
    watching = false;
    await watch;
    const counts = await traffic.stop();
    expect(counts.failed).toEqual([]);
    expect(counts.hung).toBe(0);
    expect(counts.ok).toBeGreaterThan(20);

    // While it rolled out, status said so, and the traffic's queue was the previous deployment's.
    const during = seen.filter((s) => s.state === "updating");
    expect(during.length).toBeGreaterThan(0);
    for (const s of during) {
      expect(s.rollout?.from.queue).toBe(before.replica_list[0]?.queue);
      expect(s.rollout?.to.queue).toMatch(/~int8/);
    }
    const after = await status();
    expect(after.replicas).toMatchObject({ ready: 1, desired: 1 });
    const table = await runCli(["inference", "status", NAME], stack.env);
    expect(table.stdout).toMatch(/REVISION/);
    expect(table.stdout).toContain(`{${NAME}@v1~int8}`);
  });

  it("keeps the previous deployment serving when the update's replicas cannot start, and says why", {
    timeout: 180_000,
  }, async () => {
    const serving = (await status()).replica_list[0];
    const traffic = load(2);
    expect((await deploy({ quantization: "int8", max_model_len: 999_999 })).status).toBe(200);
    await stack.waitFor(
      async () => /trained context length/.test((await status()).rollout?.failed ?? ""),
      "the update's failure to show",
      60_000,
    );
    const failed = await status();
    expect(failed.state).toBe("updating");
    expect(failed.rollout?.from.queue).toBe(serving?.queue);
    const shown = await runCli(["inference", "status", NAME], stack.env);
    expect(shown.stdout).toMatch(
      new RegExp(`updating: ${NAME}@v1 \\(revision \\w+\\) → ${NAME}@v1 \\(revision \\w+\\), 0/1 ready`),
    );
    expect(shown.stdout).toMatch(/update failed: .*trained context length/);
    expect(shown.stdout).toMatch(/the previous deployment keeps serving/);
    // It does: the clients are still answered.
    const answered = traffic.counts.ok;
    await expect.poll(() => traffic.counts.ok).toBeGreaterThanOrEqual(answered + 3);

    // Deploying what serves undoes the update: no rollout, the failing replicas gone.
    expect((await deploy({ quantization: "int8" })).status).toBe(200);
    await stack.waitFor(
      async () => {
        const s = await status();
        return s.state === "available" && !s.draining_revisions && s.replica_list.length === 1;
      },
      "the undone update's replicas to go",
      60_000,
    );
    const counts = await traffic.stop();
    expect(counts.failed).toEqual([]);
    expect(counts.hung).toBe(0);
    expect(counts.ok).toBeGreaterThan(10);
    expect((await status()).replica_list[0]?.id).toBe(serving?.id);
  });
});
