/**
 * What one organization's files may take, as a tenant would try to fill the store: past its file
 * count, or with an upload larger than what is left of its bytes (refused while it streams,
 * nothing kept), it gets a 413 naming the quota, while another organization uploads as before;
 * deleting makes room. An upload's `expires_after` gives it an `expires_at`, and once that passes
 * (aged by hand in Redis, not waited for) the file is gone: 404, unlisted, its bytes removed.
 */
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApiKey } from "../../src/keys/store.ts";
import { createOrg } from "../../src/orgs/store.ts";
import { startTinyGateway, type TinyGateway } from "../helpers/gateway.ts";
import { sendOnOwnConnection } from "../helpers/http.ts";

const QUOTA_BYTES = 1024 * 1024;
let gw: TinyGateway;
let acme: string;
let beta: string;

beforeAll(async () => {
  gw = await startTinyGateway({ env: { PLATFORM_ORG_FILES: "2", PLATFORM_ORG_FILE_BYTES: String(QUOTA_BYTES) } });
  await createOrg(gw.ctl, "acme");
  await createOrg(gw.ctl, "beta");
  acme = (await createApiKey(gw.ctl, "acme-user", "user", undefined, "acme")).key;
  beta = (await createApiKey(gw.ctl, "beta-user", "user", undefined, "beta")).key;
});

afterAll(async () => {
  await gw?.stop();
});

type FileObject = { id: string; bytes: number; created_at: number; expires_at: number | null };

/** On its own connection, so an answer that comes before the whole body is read (a 413) still arrives. */
async function upload(key: string, bytes: number, fields: Record<string, string> = {}) {
  const form = new FormData();
  form.set("purpose", "batch");
  for (const [k, v] of Object.entries(fields)) form.set(k, v);
  form.set("file", new Blob([Buffer.alloc(bytes, "x")]), "in.jsonl");
  const encoded = new Response(form);
  return sendOnOwnConnection({
    url: `${gw.gateway.url}/v1/files`,
    body: new Uint8Array(await encoded.arrayBuffer()),
    headers: { authorization: `Bearer ${key}`, "content-type": encoded.headers.get("content-type") as string },
  });
}

const files = async (key: string) =>
  (
    (await (await fetch(`${gw.gateway.url}/v1/files`, { headers: { authorization: `Bearer ${key}` } })).json()) as {
      data: FileObject[];
    }
  ).data;

const stored = async () => readdir(join(gw.settings.dataDir, "artifacts", "files")).catch(() => [] as string[]);

describe("an organization's file quota", () => {
  it("refuses the file past its count, naming the quota; another organization is not held by it", async () => {
    const first = await upload(acme, 10);
    expect(first.status).toBe(200);
    expect(((await first.json()) as FileObject).expires_at).toBeNull();
    expect((await upload(acme, 10)).status).toBe(200);
    const third = await upload(acme, 10);
    expect(third.status).toBe(413);
    const err = ((await third.json()) as { error: { code: string; message: string } }).error;
    expect(err.code).toBe("file_quota_exceeded");
    expect(err.message).toContain("PLATFORM_ORG_FILES");
    expect(err.message).toContain("organization acme");
    expect((await upload(beta, 10)).status).toBe(200);
  });

  it("refuses an upload past what is left of its bytes (from its declared length, else while it streams), and keeps nothing of it", async () => {
    for (const f of await files(acme)) {
      const res = await fetch(`${gw.gateway.url}/v1/files/${f.id}`, {
        method: "DELETE",
        headers: { authorization: `Bearer ${acme}` },
      });
      expect(res.status).toBe(200);
    }
    expect((await upload(acme, QUOTA_BYTES / 2)).status).toBe(200);
    const before = await stored();
    const over = await upload(acme, QUOTA_BYTES);
    expect(over.status).toBe(413);
    const err = ((await over.json()) as { error: { code: string; message: string } }).error;
    expect(err.code).toBe("file_quota_exceeded");
    expect(err.message).toContain("PLATFORM_ORG_FILE_BYTES");
    expect(await stored()).toEqual(before);
    expect(await files(acme)).toHaveLength(1);
  });
});

describe("expires_after", () => {
  it("sets expires_at; past it the file is gone (404, unlisted, bytes removed)", async () => {
    const res = await upload(beta, 10, { "expires_after[anchor]": "created_at", "expires_after[seconds]": "3600" });
    expect(res.status).toBe(200);
    const file = (await res.json()) as FileObject;
    expect(file.expires_at).toBe(file.created_at + 3600);
    // Aged by hand: the record's expiry moved into the past.
    const raw = JSON.parse((await gw.ctl.redis.hget(gw.ctl.keys.files, file.id)) as string);
    await gw.ctl.redis.hset(gw.ctl.keys.files, file.id, JSON.stringify({ ...raw, expires_at: file.created_at - 1 }));
    const gone = await fetch(`${gw.gateway.url}/v1/files/${file.id}`, { headers: { authorization: `Bearer ${beta}` } });
    expect(gone.status).toBe(404);
    expect((await files(beta)).map((f) => f.id)).not.toContain(file.id);
    expect(await stored()).not.toContain(`${file.id}.jsonl`);
    expect(await gw.ctl.redis.hexists(gw.ctl.keys.files, file.id)).toBe(0);
  });

  it("refuses an expiry OpenAI would not take, naming the field", async () => {
    const res = await upload(beta, 10, { "expires_after[anchor]": "created_at", "expires_after[seconds]": "5" });
    expect(res.status).toBe(400);
    const err = ((await res.json()) as { error: { message: string; param: string } }).error;
    expect(err.message).toContain("expires_after.seconds");
    expect(err.param).toBe("expires_after");
    expect(await stored()).toHaveLength((await files(acme)).length + (await files(beta)).length);
  });
});
