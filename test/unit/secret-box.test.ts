/** Services' sealed secrets (src/services/secrets.ts): AES-256-GCM bound to the secret's place, and where the key comes from. */
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { SecretBox, secretContext } from "../../src/services/secrets.ts";
import { loadSettings } from "../../src/settings/index.ts";

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe("SecretBox", () => {
  const box = SecretBox.fromKey(Buffer.alloc(32, 1));
  const here = secretContext("acme", "items", "DATABASE_URL");

  it("opens what it sealed, and nothing sealed for another place, key or that was altered", () => {
    const sealed = box.seal("postgresql://u:p@db/items", here);
    expect(sealed).not.toContain("postgresql");
    expect(box.seal("same", here)).not.toBe(box.seal("same", here)); // a fresh IV each time
    expect(box.open(sealed, here)).toBe("postgresql://u:p@db/items");
    expect(() => box.open(sealed, secretContext("rival", "items", "DATABASE_URL"))).toThrow(/does not open/);
    expect(() => SecretBox.fromKey(Buffer.alloc(32, 2)).open(sealed, here)).toThrow(/does not open/);
    const [v, iv, tag, data] = sealed.split(".");
    const flipped = `${v}.${iv}.${tag}.${(data as string).startsWith("A") ? "B" : "A"}${(data as string).slice(1)}`;
    expect(() => box.open(flipped, here)).toThrow(/does not open/);
    expect(() => box.open("plain text", here)).toThrow(/not in the v1 form/);
  });

  it("refuses a truncated tag: GCM would check only the bytes given, so a short tag is a guessable one", () => {
    const sealed = box.seal("postgresql://u:p@db/items", here);
    const [v, iv, tag, data] = sealed.split(".") as [string, string, string, string];
    for (const bytes of [1, 4, 8, 12, 15]) {
      const short = Buffer.from(tag, "base64url").subarray(0, bytes).toString("base64url");
      expect(() => box.open(`${v}.${iv}.${short}.${data}`, here)).toThrow(/does not open/);
    }
    expect(Buffer.from(tag, "base64url")).toHaveLength(16);
  });

  it("takes PLATFORM_SECRETS_KEY as base64 or hex, and names a bad one", () => {
    const b64 = Buffer.alloc(32, 3).toString("base64");
    expect(loadSettings({ PLATFORM_SECRETS_KEY: b64 }).services.secretsKey).toEqual(Buffer.alloc(32, 3));
    expect(loadSettings({ PLATFORM_SECRETS_KEY: "03".repeat(32) }).services.secretsKey).toEqual(Buffer.alloc(32, 3));
    expect(() => loadSettings({ PLATFORM_SECRETS_KEY: "short" })).toThrow(/PLATFORM_SECRETS_KEY: expected 32 bytes/);
  });

  it("without a key: one generated once into the data directory (0600) and shared; in a pod: refused", async () => {
    const dir = await mkdtemp(join(tmpdir(), "platform-secrets-"));
    dirs.push(dir);
    const settings = loadSettings({ PLATFORM_DATA_DIR: dir }).services;
    const [a, b] = await Promise.all([SecretBox.load(settings), SecretBox.load(settings)]);
    expect(b.open(a.seal("x", here), here)).toBe("x");
    expect(((await stat(join(dir, "secrets.key"))).mode & 0o777).toString(8)).toBe("600");
    expect(Buffer.from((await readFile(join(dir, "secrets.key"), "utf8")).trim(), "base64")).toHaveLength(32);
    const inPod = loadSettings({ PLATFORM_DATA_DIR: dir, POD_NAME: "platform-gateway-0" }).services;
    await expect(SecretBox.load(inPod)).rejects.toThrow(/PLATFORM_SECRETS_KEY is not set: in a cluster/);
  });
});
