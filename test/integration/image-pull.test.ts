/**
 * Pulling by digest (scaler/container-images/pull.ts) with a stand-in skopeo, a shell script that lays out
 * what a test prepared, so the checks after skopeo are tested on what no registry would serve: a
 * manifest of another digest, a corrupted layer, a manifest list (with and without an image for
 * this machine), skopeo's failure (never echoed: the platform says why). Nothing of a failed pull stays in
 * the cache; a good one is found there next time.
 */
import { createHash } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { isLoopbackRegistry, pullImage, repositoryKey } from "../../scaler/container-images/pull.ts";

const REPO = "registry.example.com:5000/acme/items";
const sha = (b: Buffer | string) => createHash("sha256").update(b).digest("hex");

let work: string;
let source: string;
let cacheDir: string;
let skopeo: string;

/**
 * A skopeo that copies `source` to the `dir:` it is given, and answers `inspect --raw` with
 * `source/list` where `list` wrote one, else the manifest; `fail` makes it print that and exit 1 instead.
 */
function fakeSkopeo(fail?: string): void {
  writeFileSync(
    skopeo,
    fail
      ? `#!/bin/sh\necho 'time="x" level=fatal msg="${fail}"' >&2\nexit 1\n`
      : `#!/bin/sh\nif [ "$1" = inspect ]; then if [ -f '${source}/list' ]; then cat '${source}/list'; else cat '${source}/manifest.json'; fi; exit 0; fi\nfor a; do last="$a"; done\ncp -r '${source}/.' "\${last#dir:}"\n`,
  );
  chmodSync(skopeo, 0o755);
}

/** A `dir:` layout in `source`: config, one layer and a manifest of them; returns the manifest's digest. */
function layout(corruptLayer = false): string {
  const config = Buffer.from(JSON.stringify({ os: "linux", architecture: "amd64", config: { Cmd: ["node"] } }));
  const layer = Buffer.from("pretend this is a tar");
  writeFileSync(join(source, sha(config)), config);
  writeFileSync(join(source, sha(layer)), corruptLayer ? "tampered" : layer);
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: {
        mediaType: "application/vnd.oci.image.config.v1+json",
        digest: `sha256:${sha(config)}`,
        size: config.length,
      },
      layers: [
        {
          mediaType: "application/vnd.oci.image.layer.v1.tar+gzip",
          digest: `sha256:${sha(layer)}`,
          size: layer.length,
        },
      ],
    }),
  );
  writeFileSync(join(source, "manifest.json"), manifest);
  writeFileSync(join(source, "version"), "Directory Transport Version: 1.1\n");
  return `sha256:${sha(manifest)}`;
}

/** A manifest list naming `manifest` for `architecture`; written where the stand-in's `inspect --raw` reads it. */
function list(manifest: string, architecture: string): string {
  const text = JSON.stringify({
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.index.v1+json",
    manifests: [
      {
        mediaType: "application/vnd.oci.image.manifest.v1+json",
        digest: manifest,
        size: 1,
        platform: { os: "linux", architecture },
      },
    ],
  });
  writeFileSync(join(source, "list"), text);
  return `sha256:${sha(text)}`;
}

beforeEach(async () => {
  work = await mkdtemp(join(tmpdir(), "platform-pull-"));
  source = join(work, "source");
  cacheDir = join(work, "cache");
  skopeo = join(work, "skopeo");
  mkdirSync(source);
  fakeSkopeo();
});
afterEach(async () => {
  await rm(work, { recursive: true, force: true });
});

const pulledDirs = (repository = REPO) => {
  const dir = join(cacheDir, "pulled", repositoryKey(repository));
  return existsSync(dir) ? readdirSync(dir) : [];
};

describe("pullImage", () => {
  it("verifies and keeps a pull, then finds it in the cache without skopeo", async () => {
    const digest = layout();
    const image = await pullImage({ repository: REPO, digest, cacheDir, skopeo });
    const dir = join(cacheDir, "pulled", repositoryKey(REPO), digest.slice(7));
    expect(image).toMatchObject({ digest, manifestDigest: digest, dir, config: { config: { Cmd: ["node"] } } });
    expect(image.layers).toHaveLength(1);
    expect(image.layers[0]?.path.startsWith(`${dir}/`)).toBe(true);
    expect(existsSync(image.layers[0]?.path as string)).toBe(true);
    expect(pulledDirs()).toEqual([digest.slice(7)]);
    expect(await pullImage({ repository: REPO, digest, cacheDir, skopeo: "/nonexistent" })).toEqual(image);
  });

  it("with checkAccess, runs a cached image only when the registry lets this credential read its manifest", async () => {
    const digest = layout();
    const image = await pullImage({ repository: REPO, digest, cacheDir, skopeo });
    fakeSkopeo("reading manifest: unauthorized: authentication required");
    const hint = " (no pull credential for registry.example.com:5000); an admin of the organization runs: …";
    await expect(
      pullImage({ repository: REPO, digest, cacheDir, skopeo, checkAccess: true, refusedHint: hint }),
    ).rejects.toThrow(`failed: not logged in to registry.example.com:5000${hint}`);
    expect(await pullImage({ repository: REPO, digest, cacheDir, skopeo })).toEqual(image);
    fakeSkopeo();
    expect(await pullImage({ repository: REPO, digest, cacheDir, skopeo, checkAccess: true })).toEqual(image);
  });

  it("a cached image is its repository's own: another repository's same digest is pulled, and a registry answering another manifest is refused", async () => {
    const digest = layout();
    await pullImage({ repository: REPO, digest, cacheDir, skopeo });
    const rival = "registry.example.com:5000/rival/items";
    // Not found in the cache under another repository: only a pull (here none can run) serves it.
    await expect(pullImage({ repository: rival, digest, cacheDir, skopeo: "/nonexistent" })).rejects.toThrow(
      /needs skopeo, which is not installed/,
    );
    expect(pulledDirs(rival)).toEqual([]);
    // The access check reads the manifest: one of another digest is not the image asked for.
    writeFileSync(join(source, "list"), "another manifest");
    await expect(pullImage({ repository: REPO, digest, cacheDir, skopeo, checkAccess: true })).rejects.toThrow(
      `${REPO}@${digest}: the registry's manifest has digest sha256:${sha(Buffer.from("another manifest"))}, not the one asked for`,
    );
  });

  it("refuses a manifest that is not the digest asked for, and a corrupted blob", async () => {
    layout();
    const other = `sha256:${"1".repeat(64)}`;
    writeFileSync(join(source, "list"), "not the list");
    await expect(pullImage({ repository: REPO, digest: other, cacheDir, skopeo })).rejects.toThrow(
      `${REPO}@${other}: the registry's manifest has digest sha256:`,
    );
    const digest = layout(true);
    await expect(pullImage({ repository: REPO, digest, cacheDir, skopeo })).rejects.toThrow(
      /: blob sha256:[0-9a-f]{64} has sha256:[0-9a-f]{64}: corrupted or tampered/,
    );
    expect(pulledDirs()).toEqual([]);
  });

  it("takes this machine's image from a manifest list, and refuses a list without one", async () => {
    const manifest = layout();
    const digest = list(manifest, process.arch === "arm64" ? "arm64" : "amd64");
    const image = await pullImage({ repository: REPO, digest, cacheDir, skopeo });
    expect([image.digest, image.manifestDigest]).toEqual([digest, manifest]);
    const elsewhere = list(manifest, "s390x");
    await expect(pullImage({ repository: REPO, digest: elsewhere, cacheDir, skopeo })).rejects.toThrow(
      /is a manifest list without an image for linux\/(amd64|arm64)/,
    );
  });

  it("says why in the platform's words, echoing nothing skopeo or the registry printed; a refusal as not logged in", async () => {
    const authFile = join(work, "auth.json");
    const password = "s3cret-password";
    writeFileSync(
      authFile,
      JSON.stringify({
        auths: { "registry.example.com:5000": { auth: Buffer.from(`team:${password}`).toString("base64") } },
      }),
    );
    const digest = layout();
    fakeSkopeo(`something broke near ${password}, says <a registry's own words>`);
    const failed = await pullImage({ repository: REPO, digest, cacheDir, skopeo, authFile }).catch((e: Error) => e);
    expect((failed as Error).message).toBe(
      `pulling ${REPO}@${digest} failed: registry.example.com:5000 did not serve the image (the scaler's skopeo could not copy it)`,
    );
    fakeSkopeo("pinging container registry 127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused");
    await expect(pullImage({ repository: REPO, digest, cacheDir, skopeo })).rejects.toThrow(
      /^pulling \S+ failed: registry\.example\.com:5000 refused the connection; is the registry running\?$/,
    );
    fakeSkopeo("reading manifest: unauthorized: authentication required");
    await expect(pullImage({ repository: REPO, digest, cacheDir, skopeo, authFile })).rejects.toThrow(
      "failed: not logged in to registry.example.com:5000 (the platform's pull session, PLATFORM_IMAGE_PULL_AUTH_FILE, is not accepted)",
    );
    await expect(pullImage({ repository: REPO, digest: "sha256:abc", cacheDir, skopeo })).rejects.toThrow(
      "not an image digest: sha256:abc",
    );
    expect(pulledDirs()).toEqual([]);
  });

  it("speaks plain HTTP to loopback registries only", () => {
    expect(["127.0.0.1:5000/a", "localhost:5000/a", "[::1]:5000/a", "127.9.9.9/a"].map(isLoopbackRegistry)).toEqual([
      true,
      true,
      true,
      true,
    ]);
    expect(["registry.example.com/a", "127.0.0.1.nip.io/a", "localhost.example.com/a"].map(isLoopbackRegistry)).toEqual(
      [false, false, false],
    );
  });
});
