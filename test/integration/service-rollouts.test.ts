/**
 * Services' rollouts on the local backend against a real Redis (docs/services.md, "Rollouts"),
 * with host processes standing in for images (the image runner itself: test/e2e/image-runner.test.ts):
 * a first deployment, a restart that brings a new secret, a new tag replacing the old replicas,
 * a tag whose process exits at start failing its rollout while the old release keeps answering,
 * undo, a crashed replica restarted, secrets masked in logs and absent from Redis, delete.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { create, toBinary } from "@bufbuild/protobuf";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ImageRunner, LocalServiceBackend } from "../../scaler/backends/services/local.ts";
import type { ReplicaBackend } from "../../scaler/backends/endpoints/backend.ts";
import { type Reconciler, startReconciler } from "../../scaler/reconciler.ts";
import { recordImage } from "../../src/container-images/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { publishVersion } from "../../src/protos/store.ts";
import { ServiceDirectory } from "../../src/services/directory.ts";
import { readLogs } from "../../src/services/logs.ts";
import { readReplicas } from "../../src/services/replicas.ts";
import { ServiceReportStore } from "../../src/services/reports.ts";
import { deployService, type RolloutContext, startRollout } from "../../src/services/rollouts.ts";
import { SecretBox } from "../../src/services/secrets.ts";
import { deleteService, getService, updateService } from "../../src/services/store.ts";
import { setVariables } from "../../src/services/variables.ts";
import { openStore } from "../../src/storage/index.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";
import { waitUntil } from "../helpers/wait.ts";

const REPO = "registry.test:5000/acme/items";
const digest = (c: string) => `sha256:${c.repeat(64)}`;
const GOOD = `
const http = require("node:http");
console.log("starting " + process.env.VERSION + " token=" + (process.env.TOKEN ?? "none"));
http.createServer((req, res) => {
  if (req.url === "/readyz") return res.end("{}");
  res.end(JSON.stringify({ version: process.env.VERSION, greeting: process.env.GREETING ?? null, token: process.env.TOKEN ?? null, pid: process.pid }));
}).listen(Number(process.env.PORT), process.env.HOST, () => console.log("listening"));
process.on("SIGTERM", () => { console.log("stopping " + process.env.VERSION); process.exit(0); });
`;
const BAD = `console.error("boom: the configuration is missing"); process.exit(3);`;
/** What each digest's "image" runs. */
const IMAGES: Record<string, { script: string; version: string }> = {
  [digest("a")]: { script: GOOD, version: "1.0.0" },
  [digest("b")]: { script: GOOD, version: "1.1.0" },
  [digest("c")]: { script: BAD, version: "9.9.9" },
};

const children = new Set<ChildProcess>();
const runner: ImageRunner = {
  prepare: async (_repository, d) => d,
  spawn: (prepared, env) => {
    const image = IMAGES[prepared as string];
    if (!image) throw new Error("no such image");
    const child = spawn(process.execPath, ["-e", image.script], {
      env: { ...env, VERSION: image.version },
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    children.add(child);
    child.once("exit", () => children.delete(child));
    return child;
  },
};

const noEndpoints: ReplicaBackend = {
  kind: "local",
  scale: async () => undefined,
  observe: async () => ({ requested: 0 }),
  remove: async () => undefined,
  endpoints: () => [],
  close: async () => undefined,
};

const WHO = { id: "key_1", name: "team" };
const PROTOS = [{ package: "platform.items.v1", version: "1.0.0" }];
/** The smallest published package with ItemService: what the images implement. */
const ITEMS_IMAGE = toBinary(
  FileDescriptorSetSchema,
  create(FileDescriptorSetSchema, {
    file: [
      {
        name: "platform/items/v1/items.proto",
        package: "platform.items.v1",
        syntax: "proto3",
        messageType: [{ name: "Item" }],
        service: [
          {
            name: "ItemService",
            method: [{ name: "GetItem", inputType: ".platform.items.v1.Item", outputType: ".platform.items.v1.Item" }],
          },
        ],
      },
    ],
  }),
);
const SECRET = "s3cr3t-value-7f2c";

let redis: PrivateRedis;
let ctl: Control;
let dir: string;
let rc: RolloutContext;
let backend: LocalServiceBackend;
let reconciler: Reconciler;

async function status() {
  return getService(ctl, "acme", "items");
}

async function waitPhase(rolloutId: number, phase: "complete" | "failed") {
  await waitUntil(
    `rollout ${rolloutId} ${phase}`,
    async () => {
      const s = await status();
      return s.rollout.id === rolloutId && s.rollout.phase === phase;
    },
    30_000,
  );
}

async function answer(): Promise<{ version: string; greeting: string | null; token: string | null; pid: number }> {
  const ready = (await readReplicas(ctl, "acme", "items")).filter((r) => r.state === "ready");
  const replica = ready[0];
  if (!replica) throw new Error("no ready replica");
  return (await fetch(`${replica.url}/hello`)).json() as never;
}

beforeAll(async () => {
  redis = await privateRedis();
  ctl = connectControl(redis.url, "platform");
  dir = await mkdtemp(join(tmpdir(), "platform-services-"));
  const box = SecretBox.fromKey(Buffer.alloc(32, 7));
  rc = {
    ctl,
    box,
    deadlineMs: 15_000,
    protos: { ctl, artifacts: openStore(`file://${dir}`), limits: { maxPackages: 10, maxVersions: 10 } },
  };
  await publishVersion(rc.protos, "acme", WHO, {
    package: "platform.items.v1",
    version: "1.0.0",
    image: ITEMS_IMAGE,
    files: [{ path: "platform/items/v1/items.proto", content: "// items\n" }],
    allowBreaking: false,
  });
  for (const [d, image] of Object.entries(IMAGES)) {
    await recordImage(ctl, {
      org: "acme",
      service: "items",
      repository: REPO,
      tag: `${image.version}-abcdef0`,
      digest: d,
      git_sha: "abcdef0",
      dirty: false,
      version: image.version,
      protos: PROTOS,
      created: 1,
      published_by: WHO,
    });
  }
  backend = new LocalServiceBackend({
    reports: new ServiceReportStore(ctl, box),
    runner,
    drainDelayMs: 200,
    stopTimeoutMs: 5_000,
  });
  reconciler = await startReconciler(ctl, noEndpoints, 250, { services: backend });
}, 60_000);

afterAll(async () => {
  await reconciler?.stop();
  await backend?.close();
  for (const c of children) c.kill("SIGKILL");
  await ctl?.redis.quit();
  await redis?.stop();
  await rm(dir, { recursive: true, force: true });
});

describe("services on the local backend", () => {
  it("deploys the first release: its replica passes its health check and the rollout completes", async () => {
    await deployService(rc, "acme", WHO, {
      name: "items",
      tag: "1.0.0-abcdef0",
      repo_type: "js",
      image_repository: REPO,
      replicas: 1,
      port: 8080,
      env: { GREETING: "hi" },
    });
    await waitPhase(1, "complete");
    const s = await status();
    expect(s.current?.tag).toBe("1.0.0-abcdef0");
    expect(s.previous).toBeNull();
    expect(s.rpc_services).toEqual(["platform.items.v1.ItemService"]);
    expect(await answer()).toMatchObject({ version: "1.0.0", greeting: "hi", token: null });
  });

  it("the gateway's directory routes ItemService to its ready replica, with its descriptors", async () => {
    const directory = new ServiceDirectory(ctl, rc.protos);
    await directory.start();
    try {
      const target = await directory.resolve("acme", "platform.items.v1.ItemService");
      const [replica] = await readReplicas(ctl, "acme", "items");
      expect(target).toMatchObject({
        org: "acme",
        service: "items",
        protocol: "connect",
        replicas: [{ id: replica?.id, url: replica?.url }],
      });
      expect(
        (await target?.descriptors())?.getService("platform.items.v1.ItemService")?.methods.map((m) => m.name),
      ).toEqual(["GetItem"]);
      expect(await directory.resolve("rival", "platform.items.v1.ItemService")).toBeUndefined();
    } finally {
      await directory.close();
    }
  });

  it("refuses a second service implementing the same RPC service in the organization", async () => {
    await expect(
      deployService(rc, "acme", WHO, {
        name: "items-two",
        tag: "1.0.0-abcdef0",
        repo_type: "js",
        image_repository: REPO,
        replicas: 1,
        port: 8080,
        env: {},
      }),
    ).rejects.toThrow(/platform.items.v1.ItemService is served by service "items" in your organization/);
  });

  it("refuses a tag that was never published, before anything starts", async () => {
    await expect(startRollout(rc, "acme", "items", WHO, { tag: "2.0.0-0000000" })).rejects.toThrow(
      /no image items:2.0.0-0000000 was published/,
    );
    expect((await status()).rollout.id).toBe(1);
  });

  it("a restart brings secrets set since, masked in the logs and sealed in Redis", async () => {
    await setVariables(ctl, rc.box, "secrets", "acme", "items", { TOKEN: SECRET }, WHO);
    expect((await answer()).token).toBeNull(); // not before the next rollout
    await startRollout(rc, "acme", "items", WHO, { restart: true });
    await waitPhase(2, "complete");
    expect(await answer()).toMatchObject({ version: "1.0.0", token: SECRET });
    await waitUntil("the restart's first line", async () =>
      (await readLogs(ctl, "acme", "items", { tail: 50 })).lines.some((l) => l.text.includes("token=")),
    );
    const { lines } = await readLogs(ctl, "acme", "items", { tail: 100 });
    expect(lines.map((l) => l.text).join("\n")).toContain("token=[secret]");
    // Nothing in Redis holds the value in clear.
    for (const key of await ctl.redis.keys("*")) {
      const type = await ctl.redis.type(key);
      const dump =
        type === "string"
          ? await ctl.redis.get(key)
          : type === "hash"
            ? JSON.stringify(await ctl.redis.hgetall(key))
            : type === "stream"
              ? JSON.stringify(await ctl.redis.xrange(key, "-", "+"))
              : "";
      expect(dump ?? "", key).not.toContain(SECRET);
    }
  });

  it("a new tag replaces the old replicas once its own are ready", async () => {
    const before = await answer();
    await startRollout(rc, "acme", "items", WHO, { tag: "1.1.0-abcdef0" });
    await waitPhase(3, "complete");
    const s = await status();
    expect(s.current?.tag).toBe("1.1.0-abcdef0");
    expect(s.previous?.tag).toBe("1.0.0-abcdef0");
    await waitUntil("the old replica gone", async () => (await readReplicas(ctl, "acme", "items")).length === 1);
    const after = await answer();
    expect(after.version).toBe("1.1.0");
    expect(after.pid).not.toBe(before.pid);
  });

  it("a tag whose process exits at start fails its rollout with the reason; the old release keeps answering", async () => {
    await startRollout(rc, "acme", "items", WHO, { tag: "9.9.9-abcdef0" });
    await waitPhase(4, "failed");
    const s = await status();
    expect(s.rollout.reason).toMatch(/exited with code 3 before becoming ready/);
    expect(s.rollout.reason).toContain("boom: the configuration is missing");
    expect(s.current?.tag).toBe("1.1.0-abcdef0");
    expect((await answer()).version).toBe("1.1.0");
    await waitUntil("the failed replica removed", async () =>
      (await readReplicas(ctl, "acme", "items")).every((r) => r.tag === "1.1.0-abcdef0"),
    );
  });

  it("undo goes back to the previous release", async () => {
    await startRollout(rc, "acme", "items", WHO, { undo: true });
    await waitPhase(5, "complete");
    expect((await status()).current?.tag).toBe("1.0.0-abcdef0");
    expect((await answer()).version).toBe("1.0.0");
  });

  it("a serving replica that crashes is restarted and reported", async () => {
    const { pid } = await answer();
    process.kill(pid, "SIGKILL");
    await waitUntil("the replica restarted and ready", async () => {
      const [r] = await readReplicas(ctl, "acme", "items");
      return r?.restarts === 1 && r.state === "ready";
    });
    const [r] = await readReplicas(ctl, "acme", "items");
    expect(r?.last_exit?.signal).toBe("SIGKILL");
    expect((await answer()).pid).not.toBe(pid);
  });

  it("scaling changes the serving release's replicas at once, without a rollout", async () => {
    await updateService(ctl, "acme", "items", (r) => ({ ...r, replicas: 2 }));
    await waitUntil(
      "two ready replicas",
      async () => (await readReplicas(ctl, "acme", "items")).filter((r) => r.state === "ready").length === 2,
    );
    await updateService(ctl, "acme", "items", (r) => ({ ...r, replicas: 1 }));
    await waitUntil("one replica", async () => (await readReplicas(ctl, "acme", "items")).length === 1);
    expect((await status()).rollout.id).toBe(5);
  });

  it("delete stops its replicas and forgets it", async () => {
    await deleteService(ctl, "acme", "items");
    await waitUntil("no replicas", async () => backend.services().length === 0 && children.size === 0);
    expect(await readReplicas(ctl, "acme", "items")).toEqual([]);
  });
});
