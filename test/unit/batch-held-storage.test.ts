/**
 * What a batch job holds rather than re-opens by name (src/batch/prepare.ts,
 * src/batch/output.ts, src/storage/file-store.ts): the input it was judged
 * on, and its parts directory. Names swapped for links afterwards must not
 * redirect a read, a write, the assembly or the clean-up.
 */
import { appendFile, lstat, mkdir, mkdtemp, readdir, readFile, rename, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { outputLocation } from "../../src/batch/output.ts";
import { checkInput, closeInput, type Input, openInput, readInput } from "../../src/batch/prepare.ts";
import { PlatformError } from "../../src/contracts/errors.ts";
import { fileUrl } from "../../src/storage/uri.ts";

let dir: string;
let victim: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "platform-held-"));
  victim = join(dir, "victim");
  await mkdir(victim);
  await writeFile(join(victim, "part-000000.jsonl"), "precious\n");
  await writeFile(join(victim, "secret.jsonl"), "SECRET\n");
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function identity(path: string): Promise<string> {
  const info = await lstat(path, { bigint: true });
  return `${info.dev}:${info.ino}`;
}

async function text(input: Input): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of readInput(input, 0)) chunks.push(chunk);
  return Buffer.concat(chunks).toString();
}

async function victimUntouched(): Promise<void> {
  expect((await readdir(victim)).sort()).toEqual(["part-000000.jsonl", "secret.jsonl"]);
  expect(await readFile(join(victim, "part-000000.jsonl"), "utf8")).toBe("precious\n");
}

describe("a local input", () => {
  it("is read from the one handle it was opened with, even after its name leads elsewhere; checkInput says input_changed", async () => {
    const path = join(dir, "in-1.jsonl");
    await writeFile(path, "mine\n");
    const input = await openInput(fileUrl(path), await identity(path), "in-1.jsonl");
    try {
      await rm(path);
      await symlink(join(victim, "secret.jsonl"), path);
      expect(await text(input)).toBe("mine\n");
      await expect(checkInput(input, "in-1.jsonl")).rejects.toMatchObject({
        code: "input_changed",
        message: expect.stringContaining("in-1.jsonl changed while the job ran"),
      });
    } finally {
      await closeInput(input);
    }
  });

  it("that is not the object the policy judged fails with input_changed, and is not read", async () => {
    const path = join(dir, "in-2.jsonl");
    await writeFile(path, "mine\n");
    const judged = await identity(path);
    // Kept, so the new file cannot reuse its inode number.
    await rename(path, `${path}.old`);
    await writeFile(path, "another\n");
    await expect(openInput(fileUrl(path), judged, "in-2.jsonl")).rejects.toMatchObject({ code: "input_changed" });
    // Its name now a link (the policy judged a real path): refused, not followed.
    await rm(path);
    await symlink(join(victim, "secret.jsonl"), path);
    await expect(openInput(fileUrl(path), judged, "in-2.jsonl")).rejects.toMatchObject({ code: "input_changed" });
  });

  it("removed while held changes nothing read; grown or shrunk is input_changed", async () => {
    const path = join(dir, "in-3.jsonl");
    await writeFile(path, "one\n");
    const input = await openInput(fileUrl(path), await identity(path), "in-3.jsonl");
    try {
      await appendFile(path, "two\n");
      // Reads stop at the size judged when it was opened.
      expect(await text(input)).toBe("one\n");
      await expect(checkInput(input, "in-3.jsonl")).rejects.toMatchObject({
        code: "input_changed",
        message: expect.stringContaining("4 bytes at the start, 8 now"),
      });
    } finally {
      await closeInput(input);
    }
    await writeFile(path, "one\n");
    const again = await openInput(fileUrl(path), await identity(path), "in-3.jsonl");
    try {
      await rm(path);
      await expect(checkInput(again, "in-3.jsonl")).resolves.toBeUndefined();
      expect(await text(again)).toBe("one\n");
    } finally {
      await closeInput(again);
    }
  });
});

describe("a local parts directory", () => {
  it("that is a link is refused before anything is written through it", async () => {
    const res = join(dir, "res-1");
    await mkdir(res);
    await symlink(victim, join(res, "job.parts"));
    const out = outputLocation(`${fileUrl(res)}/`, "job");
    try {
      await expect(out.checkParts()).rejects.toMatchObject({ status: 403, code: "storage_forbidden" });
      await expect(out.holdParts()).rejects.toBeInstanceOf(PlatformError);
      await expect(out.store.put(out.partKey(0), "pwned\n")).rejects.toMatchObject({ code: "access_denied" });
      await expect(out.store.get(out.partKey(0))).rejects.toMatchObject({ code: "access_denied" });
      await expect(out.store.head(out.partKey(0))).rejects.toMatchObject({ code: "access_denied" });
      await out.store.delete(out.partKey(0)).catch(() => undefined);
      await out.clearParts().catch(() => undefined);
    } finally {
      out.store.close();
    }
    await victimUntouched();
  });

  it("held, then swapped for a link: writes, reads and the clean-up stay in the directory held", async () => {
    const res = join(dir, "res-2");
    await mkdir(res);
    const out = outputLocation(`${fileUrl(res)}/result.jsonl`, "job");
    try {
      await out.holdParts();
      await out.checkParts();
      await out.store.put(out.partKey(0), "a\n");
      await rename(join(res, "job.parts"), join(res, "aside"));
      await symlink(victim, join(res, "job.parts"));
      await expect(out.checkParts()).rejects.toMatchObject({ status: 403, code: "storage_forbidden" });
      await out.store.put(out.partKey(1), "b\n");
      await out.store.concat([out.partKey(0), out.partKey(1)], out.resultKey);
      expect(await readFile(join(res, "result.jsonl"), "utf8")).toBe("a\nb\n");
      await out.store.delete(out.partKey(0));
      await out.clearParts();
      expect(await readdir(join(res, "aside"))).toEqual([]);
      expect((await lstat(join(res, "job.parts"))).isSymbolicLink()).toBe(true);
    } finally {
      out.store.close();
    }
    await victimUntouched();
  });

  it("held, then moved away: checkParts says so (unwritable); put back, it is the job's again", async () => {
    const res = join(dir, "res-3");
    await mkdir(res);
    const out = outputLocation(`${fileUrl(res)}/`, "job");
    try {
      await out.holdParts();
      await rename(join(res, "job.parts"), join(res, "aside"));
      await expect(out.checkParts()).rejects.toMatchObject({
        code: "unwritable",
        message: expect.stringContaining("moved or replaced"),
      });
      await writeFile(join(res, "job.parts"), "in the way");
      await expect(out.checkParts()).rejects.toMatchObject({ code: "unwritable" });
      await rm(join(res, "job.parts"));
      await rename(join(res, "aside"), join(res, "job.parts"));
      await expect(out.checkParts()).resolves.toBeUndefined();
    } finally {
      out.store.close();
    }
  });

  it("a part replaced by a link is not read by the assembly", async () => {
    const res = join(dir, "res-4");
    await mkdir(res);
    const out = outputLocation(`${fileUrl(res)}/`, "job");
    try {
      await out.holdParts();
      await out.store.put(out.partKey(0), "a\n");
      await rm(join(res, "job.parts", "part-000000.jsonl"));
      await symlink(join(victim, "secret.jsonl"), join(res, "job.parts", "part-000000.jsonl"));
      await expect(out.store.concat([out.partKey(0)], out.resultKey)).rejects.toMatchObject({ code: "access_denied" });
      expect(await readdir(res)).toEqual(["job.parts"]);
      await out.clearParts();
      expect(await readdir(res)).toEqual([]);
    } finally {
      out.store.close();
    }
    await victimUntouched();
  });
});
