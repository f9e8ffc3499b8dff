/**
 * What `platform up` says and does as it starts, which only a start of its own shows. The
 * operator's first admin key (PLATFORM_BOOTSTRAP_ADMIN_KEY, as docker-compose runs it): registered
 * by its hash on the first start, neither minted nor printed, and a changed key on a later start is
 * refused without taking the platform down (compose would otherwise restart it forever). The same
 * first start registers `--model` with the `--task` given; an unknown task is refused before
 * anything starts.
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { tinyModelPath } from "../helpers/models.ts";
import { startStack } from "../helpers/stack.ts";

let dataDir: string;

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "platform-up-bootstrap-"));
});

afterAll(async () => {
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

const whoAmI = async (baseUrl: string, key: string) =>
  (await fetch(`${baseUrl}/admin/v1/keys`, { headers: { authorization: `Bearer ${key}` } })).status;

it("registers the operator's key without printing it and --model with its --task, and a changed key later is refused while the platform serves on", {
  timeout: 120_000,
}, async () => {
  const first = randomBytes(32).toString("hex");
  const second = randomBytes(32).toString("hex");
  const one = await startStack({
    model: await tinyModelPath(),
    args: ["--name", "tiny-up", "--task", "embed", "--replicas", "0"],
    env: { PLATFORM_DATA_DIR: dataDir, PLATFORM_BOOTSTRAP_ADMIN_KEY: first },
    waitAvailable: false,
  });
  try {
    expect(one.output()).toContain("API key    the one in PLATFORM_BOOTSTRAP_ADMIN_KEY");
    expect(one.output()).not.toContain(first);
    expect(one.output()).not.toMatch(/sk-plat-/); // nothing minted
    expect(await whoAmI(one.baseUrl, first)).toBe(200);
    expect(one.output()).toMatch(/registered tiny-up@v1 from .* \(task embed\)/);
    const models = await fetch(`${one.baseUrl}/admin/v1/models`, { headers: { authorization: `Bearer ${first}` } });
    const { data } = (await models.json()) as { data: { name: string; task: string }[] };
    expect(data.map((m) => [m.name, m.task])).toEqual([["tiny-up", "embed"]]);
  } finally {
    expect(await one.stop()).toBe(0);
  }
  // The Secret changed: the second start says why it refuses the new key, keeps serving, and the first key still works.
  const two = await startStack({ env: { PLATFORM_DATA_DIR: dataDir, PLATFORM_BOOTSTRAP_ADMIN_KEY: second } });
  try {
    expect(two.output()).toMatch(/bootstrap: .*revoke/i);
    expect(two.output()).toContain("was refused (see above); the admin key registered before still works");
    expect(two.output()).not.toContain(second);
    expect(await whoAmI(two.baseUrl, first)).toBe(200);
    expect(await whoAmI(two.baseUrl, second)).toBe(401);
  } finally {
    expect(await two.stop()).toBe(0);
  }
  expect((await readdir(dataDir)).sort()).toContain("redis");
});

it("refuses an unknown --task before starting anything", async () => {
  await expect(startStack({ model: await tinyModelPath(), args: ["--task", "rerank"] })).rejects.toThrow(
    /--task rerank: use embed, generate or image/,
  );
});
