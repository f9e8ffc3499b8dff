/**
 * `platform up` whose embedded Redis dies (kill -9 of redis-server): under a small load, every
 * request is answered (503 with Retry-After while Redis is away, never a client timeout), Redis
 * comes back from its append-only file with what it had acknowledged, the same workers serve
 * again, and past the restart budget `up` exits non-zero naming Redis and its log.
 */
import { chmod, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { alive } from "../helpers/processes.ts";
import { tinyModelPath } from "../helpers/models.ts";
import { type OwnStack, startStack } from "../helpers/stack.ts";

type Status = { state: string; replica_list: { id: string; pid: number }[] };
type Outcome = { sentAt: number; doneAt: number } & (
  | { status: number; retryAfter: string | null; code?: string }
  | { failed: string }
);

/** Far longer than any answer while Redis is away may take: a request past it hung. */
const CLIENT_TIMEOUT_MS = 30_000;

const redisPid = async (stack: OwnStack) =>
  Number((await readFile(join(stack.dataDir, "redis", "redis.pid"), "utf8")).trim());

/** A redis-server that takes `delayS` to start again after its first start: a restart that loads a large AOF. */
async function slowRestartingRedis(delayS: number): Promise<string> {
  const dir = join(tmpdir(), `platform-slow-redis-${process.pid}-${Date.now()}`);
  const script = join(`${dir}.sh`);
  await writeFile(
    script,
    [
      "#!/bin/sh",
      'if [ "$1" = --version ]; then exec redis-server "$@"; fi',
      `if [ -e "${dir}.started" ]; then sleep ${delayS}; fi`,
      `touch "${dir}.started"`,
      'exec redis-server "$@"',
      "",
    ].join("\n"),
  );
  await chmod(script, 0o755);
  return script;
}

async function chat(stack: OwnStack, key: string): Promise<Outcome> {
  const sentAt = Date.now();
  try {
    const res = await fetch(`${stack.baseUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 4 }),
      signal: AbortSignal.timeout(CLIENT_TIMEOUT_MS),
    });
    const body = (await res.json()) as { error?: { code: string } };
    const answer = { status: res.status, retryAfter: res.headers.get("retry-after"), code: body.error?.code };
    return { sentAt, doneAt: Date.now(), ...answer };
  } catch (e) {
    return { sentAt, doneAt: Date.now(), failed: (e as Error).message };
  }
}

describe("platform up whose embedded Redis is killed", () => {
  const stacks: OwnStack[] = [];
  afterAll(async () => {
    await Promise.all(stacks.map((s) => s.stop()));
  });

  it("answers every request under load (503 + Retry-After while Redis is away), restarts Redis from its AOF, and serves again with the same workers", async () => {
    const stack = await startStack({
      model: await tinyModelPath(),
      args: ["--name", "tiny"],
      // Redis takes 3 s to come back, as a large AOF would: long enough for requests to meet the outage.
      env: { PLATFORM_REDIS_SERVER: await slowRestartingRedis(3) },
    });
    stacks.push(stack);
    const workers = (await stack.admin<Status>("GET", "/admin/v1/endpoints/tiny")).body.replica_list.map((r) => r.pid);
    expect(workers.length).toBeGreaterThan(0);

    // Load: a chat every 100 ms, each on its own (so some are sent while Redis is away), until told to stop.
    const outcomes: Outcome[] = [];
    const sent: Promise<void>[] = [];
    const ticker = setInterval(() => sent.push(chat(stack, stack.apiKey).then((o) => void outcomes.push(o))), 100);
    await stack.waitFor(async () => outcomes.some((o) => "status" in o && o.status === 200), "a chat under load");

    // Acknowledged just before the kill: a key, then at once kill -9 of redis-server.
    const made = await stack.admin<{ key: string }>("POST", "/admin/v1/keys", { name: "before-kill", role: "user" });
    expect(made.status).toBe(201);
    const before = await redisPid(stack);
    process.kill(before, "SIGKILL");

    // While Redis is away, requests are refused with 503 and Retry-After (polled: they come at once).
    const is = (o: Outcome, status: number) => "status" in o && o.status === status;
    await stack.waitFor(async () => outcomes.some((o) => is(o, 503)), "a 503 while Redis is away");
    const refusedAt = Math.min(...outcomes.filter((o) => is(o, 503)).map((o) => o.doneAt));
    // Serving resumes: a chat sent after a refusal is answered.
    await stack.waitFor(
      async () => outcomes.some((o) => is(o, 200) && o.sentAt > refusedAt),
      "a chat answered after the restart",
    );
    clearInterval(ticker);
    await Promise.all(sent);

    // No request hung or broke: each was answered, 200 or 503 with Retry-After.
    expect(outcomes.filter((o) => "failed" in o)).toEqual([]);
    const refused = outcomes.filter((o) => "status" in o && o.status !== 200);
    expect(refused.length).toBeGreaterThan(0);
    for (const o of refused)
      expect(o).toMatchObject({ code: "queue_unavailable", status: 503, retryAfter: expect.stringMatching(/^\d+$/) });

    // Redis was restarted (a new process), and told so; the key made before the kill is still good.
    const after = await redisPid(stack);
    expect(after).not.toBe(before);
    expect(alive(after)).toBe(true);
    expect(stack.output()).toMatch(/redis-server \(pid \d+\) ended \(signal SIGKILL\); restarting it/);
    expect(stack.output()).toMatch(/redis-server restarted \(pid \d+\)/);
    const models = await fetch(`${stack.baseUrl}/v1/models`, { headers: { authorization: `Bearer ${made.body.key}` } });
    expect(models.status).toBe(200);

    // The workers rode the outage out: the same processes serve.
    const now = (await stack.admin<Status>("GET", "/admin/v1/endpoints/tiny")).body.replica_list.map((r) => r.pid);
    expect(now, `replicas replaced; platform output:\n${stack.output()}`).toEqual(workers);
    expect(workers.every(alive)).toBe(true);
    expect(await chat(stack, stack.apiKey)).toMatchObject({ status: 200 });

    expect(await stack.stop()).toBe(0);
  }, 240_000);

  it("past its restart budget, up exits non-zero with a line naming Redis and its log", async () => {
    const stack = await startStack({
      env: { PLATFORM_REDIS_RESTARTS: "1", PLATFORM_REDIS_RESTART_WINDOW_MS: "600000", PLATFORM_STANDBY_WORKER: "0" },
    });
    stacks.push(stack);
    const exited = new Promise<number | null>((resolve) => stack.process.once("exit", (code) => resolve(code)));
    const first = await redisPid(stack);
    process.kill(first, "SIGKILL");
    // The one restart the budget allows.
    await stack.waitFor(async () => {
      const pid = await redisPid(stack);
      return pid !== first && alive(pid) && /redis-server restarted/.test(stack.output());
    }, "the restarted Redis");
    process.kill(await redisPid(stack), "SIGKILL");

    expect(await exited).toBe(1);
    const logfile = join(stack.dataDir, "redis", "redis.log");
    expect(stack.output()).toContain(`error: the embedded Redis ended (signal SIGKILL) after 1 restart(s)`);
    expect(stack.output()).toContain(`Read its log: ${logfile}`);
  });
});
