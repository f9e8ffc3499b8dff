/**
 * A tenant's uploads cannot fill the gateway's memory: three concurrent large `POST /v1/files`
 * (streamed by the client, as a big file is) leave the gateway holding far less than one upload's
 * size, where buffered multipart bodies held about twice their sum.
 * The file still arrives whole; one over PLATFORM_MAX_FILE_BYTES is refused while streaming,
 * without Content-Length too, and leaves nothing behind. The gateway runs in this process, so the
 * figures include the client's side (which generates its bodies and holds none); what is held is
 * measured after a collection, so chunks already passed on do not count.
 */
import { createHash } from "node:crypto";
import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createApiKey } from "../../src/keys/store.ts";
import { startTinyGateway, type TinyGateway } from "../helpers/gateway.ts";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;
const MiB = 1024 * 1024;
const UPLOAD = 96 * MiB;
const LIMIT = 128 * MiB;
const BOUNDARY = "----platform-upload-memory";

let gw: TinyGateway;
let key: string;

beforeAll(async () => {
  gw = await startTinyGateway({ env: { PLATFORM_MAX_FILE_BYTES: String(LIMIT) } });
  key = (await createApiKey(gw.ctl, "uploader", "user")).key;
});

afterAll(async () => {
  await gw?.stop();
});

/** The bytes of the files in `dir` (temporary ones being written included). */
async function bytesUnder(dir: string): Promise<number> {
  const names = await readdir(dir).catch(() => [] as string[]);
  const sizes = await Promise.all(
    names.map((n) =>
      stat(join(dir, n)).then(
        (s) => s.size,
        () => 0,
      ),
    ),
  );
  return sizes.reduce((a, b) => a + b, 0);
}

/** One JSONL line of 1 MiB, repeated: the bytes of an upload of `size`. */
const LINE = Buffer.from(`${JSON.stringify({ custom_id: "x", pad: "y".repeat(MiB - 30) })}\n`);

/** A multipart body of `size` file bytes, generated as it is sent (the purpose after the file, as some clients order it). */
function body(size: number, hold: Promise<void>): { stream: ReadableStream<Uint8Array>; sha256: string } {
  const hash = createHash("sha256");
  let sent = 0;
  const head = Buffer.from(
    `--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\nContent-Type: application/jsonl\r\n\r\n`,
  );
  const tail = Buffer.from(
    `\r\n--${BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--${BOUNDARY}--\r\n`,
  );
  for (let at = 0; at < size; at += LINE.length) hash.update(LINE.subarray(0, Math.min(LINE.length, size - at)));
  let started = false;
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (sent >= size / 2) await hold;
      if (!started) {
        started = true;
        controller.enqueue(head);
      } else if (sent < size) {
        const n = Math.min(LINE.length, size - sent);
        controller.enqueue(LINE.subarray(0, n));
        sent += n;
      } else {
        controller.enqueue(tail);
        controller.close();
      }
    },
  });
  return { stream, sha256: hash.digest("hex") };
}

function upload(size: number, hold: Promise<void> = Promise.resolve()) {
  const { stream, sha256 } = body(size, hold);
  const res = fetch(`${gw.gateway.url}/v1/files`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": `multipart/form-data; boundary=${BOUNDARY}` },
    body: stream,
    duplex: "half",
  } as RequestInit);
  return { res, sha256 };
}

describe("file uploads stream to the store", () => {
  it("three concurrent uploads hold far less than one of them in the gateway", { timeout: 300_000 }, async () => {
    const live = () => {
      gc();
      const m = process.memoryUsage();
      return m.heapUsed + m.arrayBuffers;
    };
    const base = live();
    const rssBase = process.memoryUsage().rss;
    let rssPeak = rssBase;
    const sampler = setInterval(() => {
      rssPeak = Math.max(rssPeak, process.memoryUsage().rss);
    }, 5);
    let release: () => void = () => undefined;
    const hold = new Promise<void>((resolve) => {
      release = resolve;
    });
    const uploads = [upload(UPLOAD, hold), upload(UPLOAD, hold), upload(UPLOAD, hold)];
    let held = 0;
    try {
      // Each client stops at half its file: once the gateway has passed on what came (streamed, the
      // store's files hold it; buffered, the gateway's memory does), what it still holds is measured.
      await vi.waitFor(
        async () => {
          const onDisk = await bytesUnder(join(gw.settings.dataDir, "artifacts", "files"));
          held = live() - base;
          expect(onDisk >= 3 * (UPLOAD / 2 - 4 * MiB) || held >= UPLOAD).toBe(true);
        },
        { timeout: 120_000, interval: 500 },
      );
      held = live() - base;
      release();
      const answers = await Promise.all(uploads.map((u) => u.res));
      for (const [i, res] of answers.entries()) {
        const file = (await res.json()) as { id: string; bytes: number; purpose: string };
        expect(res.status, JSON.stringify(file)).toBe(200);
        expect(file).toMatchObject({ bytes: UPLOAD, purpose: "batch" });
        const content = await fetch(`${gw.gateway.url}/v1/files/${file.id}/content`, {
          headers: { authorization: `Bearer ${key}` },
        });
        const hash = createHash("sha256");
        for await (const chunk of content.body as unknown as AsyncIterable<Uint8Array>) hash.update(chunk);
        expect(hash.digest("hex")).toBe(uploads[i]?.sha256);
      }
    } finally {
      release();
      clearInterval(sampler);
    }
    console.log(
      `upload memory, 3 concurrent ${UPLOAD / MiB} MiB uploads: held at half-way ${(held / MiB).toFixed(1)} MiB (heap + buffers after GC); rss ${(rssBase / MiB).toFixed(0)} -> peak ${(rssPeak / MiB).toFixed(0)} MiB (garbage not yet collected included)`,
    );
    // Buffered, the gateway held at least what had come (3 x 48 MiB, about twice over); streamed, a few chunks each.
    expect(held, `the gateway held ${(held / MiB).toFixed(1)} MiB`).toBeLessThan(UPLOAD / 4);
  });

  it("refuses an upload over PLATFORM_MAX_FILE_BYTES while it streams, with no Content-Length, and keeps nothing", async () => {
    const before = await readdir(join(gw.settings.dataDir, "artifacts", "files")).catch(() => [] as string[]);
    const { res } = upload(LIMIT + MiB);
    const answer = await res;
    expect(answer.status).toBe(413);
    const err = ((await answer.json()) as { error: { message: string } }).error;
    expect(err.message).toContain("PLATFORM_MAX_FILE_BYTES");
    const after = await readdir(join(gw.settings.dataDir, "artifacts", "files")).catch(() => [] as string[]);
    expect(after.filter((f) => !before.includes(f))).toEqual([]);
  });
});
