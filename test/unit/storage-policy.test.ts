/**
 * The storage policy on its own (src/storage/policy.ts): root parsing names
 * the setting at fault, areas are per key, prefixes match by whole segments,
 * symbolic links are judged by where they lead, and a key's area that is
 * itself a link is refused rather than followed.
 */
import { lstat, mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PlatformError } from "../../src/contracts/errors.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { parseStorageRoots, StoragePolicy } from "../../src/storage/policy.ts";

let dir: string;
const user = { id: "key_0123456789ab", role: "user" as const };
const admin = { id: "key_aaaaaaaaaaaa", role: "admin" as const };

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "platform-policy-"));
  await mkdir(join(dir, "root", user.id), { recursive: true });
  await mkdir(join(dir, "out"), { recursive: true });
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function refused(work: Promise<unknown>): Promise<PlatformError> {
  const e = await work.then(
    () => undefined,
    (error: unknown) => error,
  );
  expect(e).toBeInstanceOf(PlatformError);
  expect(e).toMatchObject({ status: 403, code: "storage_forbidden" });
  return e as PlatformError;
}

describe("storage roots", () => {
  it("parse from the environment; a bad one names its variable", () => {
    const settings = loadSettings({
      PLATFORM_STORAGE_ROOTS: "/srv/batch, file:///data ,s3://bucket/pre/fix",
      PLATFORM_ADMIN_STORAGE_ROOTS: "",
    });
    expect(settings.storageRoots).toEqual([
      { scheme: "file", path: "/srv/batch" },
      { scheme: "file", path: "/data" },
      { scheme: "s3", bucket: "bucket", prefix: "pre/fix" },
    ]);
    expect(settings.adminStorageRoots).toEqual([]);
    expect(() => loadSettings({ PLATFORM_STORAGE_ROOTS: "relative/dir" })).toThrow(
      /PLATFORM_STORAGE_ROOTS: "relative\/dir" is a relative path/,
    );
    expect(() => loadSettings({ PLATFORM_ADMIN_STORAGE_ROOTS: "ftp://x" })).toThrow(
      /PLATFORM_ADMIN_STORAGE_ROOTS: unsupported storage URI/,
    );
    expect(() => parseStorageRoots("s3://Bad_Bucket", "X")).toThrow(/^X: invalid storage URI/);
  });

  it("allow nothing when none are configured, and say so", async () => {
    const e = await refused(new StoragePolicy().confine("/etc/passwd", admin, "input"));
    expect(e.message).toMatch(/no storage roots are configured/);
    expect(e.message).toMatch(/PLATFORM_STORAGE_ROOTS/);
    await refused(new StoragePolicy().confine("s3://bucket/x.jsonl", user, "input"));
  });

  it("give a user key its own area of each root, and an admin key whole roots plus the admin roots", async () => {
    const policy = new StoragePolicy({
      roots: [
        { scheme: "file", path: join(dir, "root") },
        { scheme: "s3", bucket: "bkt", prefix: "p" },
      ],
      adminRoots: [{ scheme: "file", path: join(dir, "out") }],
    });
    expect(policy.areasFor(user)).toEqual([
      { scheme: "file", path: join(dir, "root", user.id) },
      { scheme: "s3", bucket: "bkt", prefix: `p/${user.id}` },
    ]);
    await expect(policy.confine(`s3://bkt/p/${user.id}/in.jsonl`, user, "input")).resolves.toMatchObject({
      uri: `s3://bkt/p/${user.id}/in.jsonl`,
    });
    await refused(policy.confine("s3://bkt/p/other/in.jsonl", user, "input"));
    await refused(policy.confine(`s3://bkt/p/${user.id}-x/in.jsonl`, user, "input"));
    await refused(policy.confine(`s3://bkt/px/${user.id}/in.jsonl`, user, "input"));
    await refused(policy.confine(join(dir, "out", "x.jsonl"), user, "output"));
    await expect(policy.confine(join(dir, "out", "x.jsonl"), admin, "output")).resolves.toMatchObject({
      uri: `file://${dir}/out/x.jsonl`,
    });
    const relative = await policy.confine("sub/in.jsonl", user, "input");
    expect(relative).toEqual({
      uri: `file://${dir}/root/${user.id}/sub/in.jsonl`,
      shown: "sub/in.jsonl",
      relative: true,
    });
  });

  it("judge file URIs after '..' and symbolic links", async () => {
    const policy = new StoragePolicy({ roots: [{ scheme: "file", path: join(dir, "root") }] });
    const area = join(dir, "root", user.id);
    await writeFile(join(dir, "out", "secret.jsonl"), "x\n");
    await symlink(join(dir, "out", "secret.jsonl"), join(area, "link.jsonl"));
    await symlink(join(dir, "out"), join(area, "dir"));
    await symlink(join(dir, "out", "later.jsonl"), join(area, "dangling.jsonl"));
    await refused(policy.confine(join(area, "link.jsonl"), user, "input"));
    await refused(policy.confine(join(area, "dir", "new", "result.jsonl"), user, "output"));
    await refused(policy.confine(join(area, "dangling.jsonl"), user, "output"));
    await refused(policy.confine(`${area}/../x.jsonl`, user, "input"));
    await refused(policy.confine("../x.jsonl", user, "input"));
    // A link that stays inside is fine, and the real location is what is used.
    await writeFile(join(area, "real.jsonl"), "y\n");
    await symlink(join(area, "real.jsonl"), join(area, "alias.jsonl"));
    await expect(policy.confine("alias.jsonl", user, "input")).resolves.toMatchObject({
      uri: `file://${area}/real.jsonl`,
      shown: "alias.jsonl",
    });
  });

  it("refuses a key's area that is itself a symbolic link, wherever it leads", async () => {
    const root = join(dir, "linked-root");
    await mkdir(root, { recursive: true });
    // Planted by anyone who can write in the root: the area leads to "/".
    await symlink("/", join(root, user.id));
    const policy = new StoragePolicy({ roots: [{ scheme: "file", path: root }] });
    for (const uri of [
      "/etc/passwd",
      "/tmp/x/",
      `${root}/${user.id}/etc/passwd`,
      `file://${root}/${user.id}/x.jsonl`,
      "etc/passwd",
      "out/",
    ]) {
      const e = await refused(policy.confine(uri, user, uri.endsWith("/") ? "output" : "input"));
      if (uri.includes(user.id) || !uri.startsWith("/"))
        expect(e.message, uri).toContain(`your area file://${root}/${user.id}/ is a symbolic link`);
    }
  });

  it("refuses an area that is a link to another tenant's area inside the same root", async () => {
    const root = join(dir, "shared-root");
    const other = "key_bbbbbbbbbbbb";
    await mkdir(join(root, other), { recursive: true });
    await writeFile(join(root, other, "private.jsonl"), "theirs\n");
    await symlink(join(root, other), join(root, user.id));
    const policy = new StoragePolicy({ roots: [{ scheme: "file", path: root }] });
    // The real path lies inside the real root, but not inside <real root>/<key id>.
    await refused(policy.confine("private.jsonl", user, "input"));
    await refused(policy.confine(join(root, user.id, "private.jsonl"), user, "input"));
    await refused(policy.confine(join(root, other, "private.jsonl"), user, "input"));
    // The other tenant, and an admin (whole roots, links followed), are unaffected.
    await expect(policy.confine("private.jsonl", { id: other, role: "user" }, "input")).resolves.toMatchObject({
      uri: `file://${root}/${other}/private.jsonl`,
    });
    await expect(policy.confine(join(root, other, "private.jsonl"), admin, "input")).resolves.toMatchObject({
      uri: `file://${root}/${other}/private.jsonl`,
    });
  });

  it("follows a root that is a link (the operator's), but judges areas under its real path", async () => {
    const real = join(dir, "real-root");
    await mkdir(join(real, user.id), { recursive: true });
    await writeFile(join(real, user.id, "in.jsonl"), "x\n");
    await symlink(real, join(dir, "root-link"));
    const policy = new StoragePolicy({ roots: [{ scheme: "file", path: join(dir, "root-link") }] });
    await expect(policy.confine("in.jsonl", user, "input")).resolves.toMatchObject({
      uri: `file://${real}/${user.id}/in.jsonl`,
      shown: "in.jsonl",
    });
  });

  it("gives the identity of an existing object it judged, so a later open can prove it is the same", async () => {
    const policy = new StoragePolicy({ roots: [{ scheme: "file", path: join(dir, "root") }] });
    await writeFile(join(dir, "root", user.id, "ident.jsonl"), "x\n");
    const info = await lstat(join(dir, "root", user.id, "ident.jsonl"), { bigint: true });
    expect((await policy.confine("ident.jsonl", user, "input")).identity).toBe(`${info.dev}:${info.ino}`);
    expect((await policy.confine("not-yet.jsonl", user, "output")).identity).toBeUndefined();
  });

  it("confines another organization's admins to <root>/orgs/<org>/ and its users to <root>/orgs/<org>/<id>/", async () => {
    const root = join(dir, "org-root");
    const policy = new StoragePolicy({
      roots: [
        { scheme: "file", path: root },
        { scheme: "s3", bucket: "bkt", prefix: "p" },
      ],
      adminRoots: [{ scheme: "file", path: join(dir, "out") }],
    });
    const acmeAdmin = { id: "key_acacacacacac", role: "admin" as const, org: "acme" };
    const acmeUser = { id: "key_a0a0a0a0a0a0", role: "user" as const, org: "acme" };
    const rivalAdmin = { id: "key_bcbcbcbcbcbc", role: "admin" as const, org: "rival" };
    expect(policy.areasFor(acmeAdmin)).toEqual([
      { scheme: "file", path: join(root, "orgs", "acme") },
      { scheme: "s3", bucket: "bkt", prefix: "p/orgs/acme" },
    ]);
    expect(policy.areasFor(acmeUser)).toEqual([
      { scheme: "file", path: join(root, "orgs", "acme", acmeUser.id) },
      { scheme: "s3", bucket: "bkt", prefix: `p/orgs/acme/${acmeUser.id}` },
    ]);
    await mkdir(join(root, "orgs", "acme", acmeUser.id), { recursive: true });
    await writeFile(join(root, "orgs", "acme", acmeUser.id, "in.jsonl"), "x\n");
    const theirs = join(root, "orgs", "acme", acmeUser.id, "in.jsonl");
    // Relative names resolve in the caller's own area; the organization's admin reaches its users' areas.
    await expect(policy.confine("in.jsonl", acmeUser, "input")).resolves.toMatchObject({ uri: `file://${theirs}` });
    await expect(policy.confine(theirs, acmeAdmin, "input")).resolves.toMatchObject({ uri: `file://${theirs}` });
    // Another organization reaches none of it, nor the whole root, nor the operators' admin roots.
    for (const uri of [theirs, `${root}/orgs/rival/../acme/${acmeUser.id}/in.jsonl`, `${root}/x.jsonl`]) {
      await refused(policy.confine(uri, rivalAdmin, "input"));
    }
    await refused(policy.confine(join(dir, "out", "x.jsonl"), acmeAdmin, "output"));
    await refused(policy.confine("s3://bkt/p/orgs/acme/x.jsonl", rivalAdmin, "input"));
    await refused(policy.confine(`s3://bkt/p/orgs/acme/x.jsonl`, acmeUser, "input"));
    // The install's own users keep <root>/<key id>/, and an operator the whole root, other organizations' areas included.
    expect(policy.areasFor(user)[0]).toEqual({ scheme: "file", path: join(root, user.id) });
    await expect(policy.confine(theirs, admin, "input")).resolves.toMatchObject({ uri: `file://${theirs}` });
    // An organization's area that is a link (to another's) is refused, at any segment on the way.
    await mkdir(join(root, "orgs", "rival"), { recursive: true });
    await symlink(join(root, "orgs", "acme"), join(root, "orgs", "evil"));
    const evil = { id: "key_e0e0e0e0e0e0", role: "admin" as const, org: "evil" };
    const e = await refused(policy.confine(`${acmeUser.id}/in.jsonl`, evil, "input"));
    expect(e.message).toContain("is a symbolic link");
  });

  it("answers a NUL character with 400 invalid_uri, not a crash", async () => {
    const policy = new StoragePolicy({ roots: [{ scheme: "file", path: join(dir, "root") }] });
    await expect(policy.confine(`file://${dir}/root/${user.id}/a%00b.jsonl`, user, "input")).rejects.toMatchObject({
      status: 400,
      code: "invalid_uri",
    });
  });
});
