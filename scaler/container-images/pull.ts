/**
 * Pulling a published service image by digest for the local backend (issue 24), without a container
 * engine: `skopeo copy` into a `dir:` layout under the cache (not `oci:`, which would convert a
 * docker manifest to OCI and so change the digest we were asked for), then every blob read back
 * and checked against its sha256 here, so what runs is exactly what was published whatever skopeo
 * did. A pull lands in a temp dir renamed into place only once verified: a crash never leaves a
 * cached image that looks complete. skopeo reaches the registry only at addresses the registry
 * policy allows (checked first, then every connection through the guarded proxy), and errors are
 * the platform's words: nothing skopeo or the registry printed is echoed.
 */
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rename, rm, writeFile } from "node:fs/promises";
import { arch, tmpdir } from "node:os";
import { join } from "node:path";
import type { AddressPolicy } from "../../src/outbound/addresses.ts";
import { literalRefusal, resolveAllowed } from "../../src/outbound/guard.ts";
import { isolatedCommand, proxyEnvironment, withGuardedProxy } from "../../src/outbound/proxy.ts";
import { pullFailure } from "../../src/container-images/pull-failure.ts";
import { isLoopbackHost } from "../../src/registry-credentials/names.ts";

/** What a layer's blob is, as the manifest says. */
export type ImageLayer = { digest: string; mediaType: string; size: number; path: string };

/** The parts of an image config (OCI image spec, "config") that say how to run it. */
export type ImageRunConfig = {
  Entrypoint?: string[] | null;
  Cmd?: string[] | null;
  Env?: string[] | null;
  WorkingDir?: string;
  User?: string;
};

export type ImageConfig = { architecture?: string; os?: string; config?: ImageRunConfig };

export type PulledImage = {
  repository: string;
  /** The digest asked for: the manifest's, or the manifest list's the manifest was picked from. */
  digest: string;
  /** The digest of the manifest whose layers these are. */
  manifestDigest: string;
  /** Where the blobs lie (skopeo's `dir:` layout, one folder per digest). */
  dir: string;
  config: ImageConfig;
  /** Bottom first. */
  layers: ImageLayer[];
};

export type PullOptions = {
  /** `host[:port]/path`, no tag or digest. */
  repository: string;
  /** `sha256:<64 hex>`: a manifest's, or a manifest list's (linux and this machine's architecture is picked). */
  digest: string;
  cacheDir: string;
  /** A containers auth.json (`buildah login` writes it); without it skopeo's own default. */
  authFile?: string;
  /**
   * What a refused pull says after "not logged in to <host>": the fix for whoever can act on it
   * (runner.ts names the organization's `platform registry credentials set`). Default: the operator's file.
   */
  refusedHint?: string;
  /**
   * Ask the registry for the manifest even when the digest is cached, with these credentials: a
   * cached image is run for an organization only if its own pull would have been allowed.
   */
  checkAccess?: boolean;
  /**
   * Where skopeo may connect, per `host[:port]` (src/container-images/registries.ts `registryAddresses`): the
   * registry's address is checked before skopeo runs, and every connection it makes (a redirect's
   * target judged as its own host) goes through the guarded proxy.
   * The scaler always gives it; tests with a stand-in skopeo may not.
   */
  addresses?: (host: string) => AddressPolicy;
  /** The skopeo to run (tests); default `skopeo` on PATH. */
  skopeo?: string;
};

const MANIFEST_TYPES = new Set([
  "application/vnd.oci.image.manifest.v1+json",
  "application/vnd.docker.distribution.manifest.v2+json",
]);
const LIST_TYPES = new Set([
  "application/vnd.oci.image.index.v1+json",
  "application/vnd.docker.distribution.manifest.list.v2+json",
]);

type Descriptor = {
  mediaType?: string;
  digest: string;
  size: number;
  platform?: { os?: string; architecture?: string };
};
type Manifest = { schemaVersion?: number; mediaType?: string; config?: Descriptor; layers?: Descriptor[] };
type ManifestList = { mediaType?: string; manifests?: Descriptor[] };

const DIGEST = /^sha256:([0-9a-f]{64})$/;

/** 127.0.0.0/8, localhost, [::1]: the only registries spoken to over plain HTTP (docs/publish.md, "TLS"). */
export const isLoopbackRegistry = (repository: string) => isLoopbackHost(repository.split("/")[0] as string);

/** Node's name for the machine's architecture, as images name it. */
const GOARCH: Record<string, string> = { x64: "amd64", arm64: "arm64", arm: "arm", ppc64: "ppc64le", s390x: "s390x" };

const inFlight = new Map<string, Promise<PulledImage>>();

/**
 * The image `repository@digest`, pulled into `cacheDir` (or found there) and verified. Concurrent
 * pulls of one digest into one cache with one credential share one skopeo.
 */
export function pullImage(options: PullOptions): Promise<PulledImage> {
  const hex = DIGEST.exec(options.digest)?.[1];
  if (!hex)
    return Promise.reject(new Error(`not an image digest: ${options.digest} (expected sha256:<64 hex digits>)`));
  if (!/^[^\s@:/]+(?::\d+)?(?:\/[^\s@:]+)+$/.test(options.repository) && !options.repository.startsWith("["))
    return Promise.reject(new Error(`not an image repository: ${options.repository} (expected host[:port]/path)`));
  // Per credential too: one organization's pull never stands in for another's.
  const key = `${options.cacheDir}\0${options.repository}\0${options.digest}\0${options.authFile ?? ""}`;
  let pull = inFlight.get(key);
  if (!pull) {
    pull = pullOnce(options, hex).finally(() => inFlight.delete(key));
    inFlight.set(key, pull);
  }
  return pull;
}

/**
 * A repository's folder name in the cache (16 hex digits of its sha256: no `:` or `/`, which the
 * overlay's options could not hold): a cached image is the one pulled from that repository, never
 * a same-digest pull of another organization's (issue 38).
 */
export const repositoryKey = (repository: string) => sha256(Buffer.from(repository)).slice(0, 16);

async function pullOnce(options: PullOptions, hex: string): Promise<PulledImage> {
  const parent = join(options.cacheDir, "pulled", repositoryKey(options.repository));
  const dir = join(parent, hex);
  // A folder there was renamed into place only after every blob was verified: reading its
  // manifest and config back (small) is enough; the layers are not hashed again.
  if (existsSync(dir)) {
    if (options.checkAccess) {
      // The registry's answer is the manifest (or list) with the digest asked for, or nothing runs.
      const raw = await skopeoInspectRaw(options);
      if (`sha256:${sha256(raw)}` !== options.digest)
        throw new Error(
          `${options.repository}@${options.digest}: the registry's manifest has digest sha256:${sha256(raw)}, not the one asked for`,
        );
    }
    return readPulled(options, dir, false);
  }
  await mkdir(parent, { recursive: true });
  const temp = await mkdtemp(join(parent, `.pull-${hex.slice(0, 12)}-`));
  try {
    await skopeoCopy(options, temp);
    const image = await readPulled(options, temp, true);
    await rename(temp, dir).catch(async (error: NodeJS.ErrnoException) => {
      // Another process pulled the same digest meanwhile: its copy is as good as ours.
      if (error.code !== "ENOTEMPTY" && error.code !== "EEXIST") throw error;
      await rm(temp, { recursive: true, force: true });
    });
    return {
      ...image,
      dir,
      layers: image.layers.map((l) => ({ ...l, path: join(dir, l.path.slice(temp.length + 1)) })),
    };
  } catch (error) {
    await rm(temp, { recursive: true, force: true });
    throw error;
  }
}

/** The manifest, config and layers in a `dir:` layout, checked against `options.digest`; with `hashLayers` every layer blob too. */
async function readPulled(options: PullOptions, dir: string, hashLayers: boolean): Promise<PulledImage> {
  const what = `${options.repository}@${options.digest}`;
  const bytes = await readFile(join(dir, "manifest.json"));
  let manifestDigest = `sha256:${sha256(bytes)}`;
  if (manifestDigest !== options.digest) {
    // skopeo picks one image out of a manifest list; the list itself must then be the digest asked for.
    const list = await readFile(join(dir, "list.manifest.json")).catch(() => undefined);
    if (!list || `sha256:${sha256(list)}` !== options.digest)
      throw new Error(`${what}: the registry's manifest has digest ${manifestDigest}, not the one asked for`);
    const picked = pickFromList(JSON.parse(list.toString("utf8")) as ManifestList, what);
    if (picked.digest !== manifestDigest)
      throw new Error(`${what}: the manifest pulled (${manifestDigest}) is not the list's ${picked.digest}`);
    manifestDigest = picked.digest;
  }
  const manifest = JSON.parse(bytes.toString("utf8")) as Manifest;
  const type = manifest.mediaType ?? "application/vnd.oci.image.manifest.v1+json";
  if (LIST_TYPES.has(type)) throw new Error(`${what} is a manifest list that skopeo did not resolve to one image`);
  if (!MANIFEST_TYPES.has(type) || !manifest.config || !Array.isArray(manifest.layers))
    throw new Error(`${what}: unsupported manifest ${type} (expected an OCI or docker v2 image manifest)`);
  const blob = async (d: Descriptor, hash: boolean): Promise<string> => {
    const blobHex = DIGEST.exec(d.digest)?.[1];
    if (!blobHex) throw new Error(`${what}: unsupported blob digest ${d.digest} (sha256 only)`);
    const path = join(dir, blobHex);
    if (hash) {
      const actual = await sha256File(path).catch(() => undefined);
      if (actual === undefined) throw new Error(`${what}: blob ${d.digest} missing from the pull`);
      if (actual !== blobHex) throw new Error(`${what}: blob ${d.digest} has sha256:${actual}: corrupted or tampered`);
    }
    return path;
  };
  const configPath = await blob(manifest.config, true);
  const config = JSON.parse(await readFile(configPath, "utf8")) as ImageConfig;
  if (config.os !== undefined && config.os !== "linux")
    throw new Error(`${what} is an image for ${config.os}, not linux`);
  const layers: ImageLayer[] = [];
  for (const d of manifest.layers)
    layers.push({
      digest: d.digest,
      mediaType: d.mediaType ?? "",
      size: d.size,
      path: await blob(d, hashLayers),
    });
  return { repository: options.repository, digest: options.digest, manifestDigest, dir, config, layers };
}

function pickFromList(list: ManifestList, what: string): Descriptor {
  const want = GOARCH[arch()] ?? arch();
  const found = (list.manifests ?? []).find(
    (m) =>
      m.platform?.os === "linux" && m.platform.architecture === want && m.mediaType && MANIFEST_TYPES.has(m.mediaType),
  );
  if (!found) throw new Error(`${what} is a manifest list without an image for linux/${want}`);
  return found;
}

/** The registry's address checked before a puller runs (a refused one is an error naming the registry and the settings). */
export async function checkReachable(
  options: Pick<PullOptions, "repository" | "digest" | "authFile" | "refusedHint">,
  addresses: AddressPolicy,
): Promise<void> {
  const host = options.repository.split("/")[0] as string;
  const what = `${options.repository}@${options.digest}`;
  await resolveAllowed(
    new URL(`http://${host}`).hostname,
    addresses,
    (kind) =>
      new Error(
        `pulling ${what} failed: ${host} is at a ${kind} address, which image registries may not be at (the operator allows one with PLATFORM_IMAGE_REGISTRIES or PLATFORM_IMAGE_REGISTRIES_ALLOWED_ADDRESSES)`,
      ),
  ).catch((e: NodeJS.ErrnoException) => {
    if (e.code === undefined) throw e;
    throw pullFailure(options, e.code === "ENOTFOUND" || e.code === "EAI_AGAIN" ? "no such host" : e.code);
  });
}

/**
 * Runs skopeo with `args`: without `options.addresses` (a stand-in skopeo in tests) as it is;
 * with them, once the registry's address is checked, and with every connection skopeo makes
 * through the guarded proxy (src/outbound/proxy.ts).
 */
async function runSkopeo(options: PullOptions, args: string[], timeout: number): Promise<Buffer> {
  const bin = options.skopeo ?? "skopeo";
  const missing = () =>
    new Error(`pulling ${options.repository} needs skopeo, which is not installed: apt-get install skopeo`);
  const exec = (command: { file: string; args: string[] }, env: NodeJS.ProcessEnv, refused: readonly string[]) =>
    new Promise<Buffer>((resolve, reject) =>
      execFile(
        command.file,
        command.args,
        { encoding: "buffer", timeout, maxBuffer: 16 * 1024 * 1024, env },
        (error, stdout, stderr) => {
          if (!error) return resolve(stdout);
          const text = stderr.toString("utf8");
          if ((error as NodeJS.ErrnoException).code === "ENOENT" || (command.file !== bin && error.code === 127))
            return reject(missing());
          if (command.file !== bin && /^unshare: /m.test(text))
            return reject(
              new Error(
                `pulling ${options.repository} failed: the scaler cannot give skopeo a network namespace of its own (unshare --net needs user namespaces, or root)`,
              ),
            );
          reject(pullFailure(options, text || error.message, refused));
        },
      ),
    );
  const addresses = options.addresses;
  if (!addresses) return exec({ file: bin, args }, process.env, []);
  await checkReachable(options, addresses(options.repository.split("/")[0] as string));
  // Go (skopeo) dials loopback literals and `localhost` itself, never through a proxy: where the
  // policy refuses loopback, skopeo runs where the host's loopback is not (src/outbound/proxy.ts).
  // A loopback registry the operator allows is reached directly, as it must be.
  const loopbackRefused =
    literalRefusal("127.0.0.1", addresses("127.0.0.1:0")) !== undefined &&
    literalRefusal("::1", addresses("[::1]:0")) !== undefined;
  if (isLoopbackRegistry(options.repository) || !loopbackRefused)
    return withGuardedProxy(addresses, (proxy) =>
      exec({ file: bin, args }, { ...process.env, ...proxyEnvironment(proxy) }, proxy.refused),
    );
  const dir = await mkdtemp(join(tmpdir(), "platform-pull-proxy-"));
  try {
    const socket = join(dir, "proxy.sock");
    return await withGuardedProxy(
      addresses,
      (proxy) => exec(isolatedCommand(socket, [bin, ...args]), process.env, proxy.refused),
      { socket },
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function skopeoCopy(options: PullOptions, dest: string): Promise<void> {
  const source = `docker://${options.repository}@${options.digest}`;
  const args = [
    "copy",
    "--quiet",
    ...(options.authFile ? ["--src-authfile", options.authFile] : []),
    ...(isLoopbackRegistry(options.repository) ? ["--src-tls-verify=false"] : []),
    source,
    `dir:${dest}`,
  ];
  await runSkopeo(options, args, 30 * 60_000);
  // skopeo's `dir:` keeps the list it picked from only under `--all`; keep it ourselves (a second
  // `skopeo inspect --raw`, only for a list) so the picked manifest can be tied to the digest asked for.
  const bytes = await readFile(join(dest, "manifest.json"));
  if (`sha256:${sha256(bytes)}` !== options.digest)
    await writeFile(join(dest, "list.manifest.json"), await skopeoInspectRaw(options));
}

/** The manifest (or list) as the registry serves it: also the cheapest "may I pull this?". */
function skopeoInspectRaw(options: PullOptions): Promise<Buffer> {
  return runSkopeo(
    options,
    [
      "inspect",
      "--raw",
      ...(options.authFile ? ["--authfile", options.authFile] : []),
      ...(isLoopbackRegistry(options.repository) ? ["--tls-verify=false"] : []),
      `docker://${options.repository}@${options.digest}`,
    ],
    60_000,
  );
}

const sha256 = (bytes: Buffer) => createHash("sha256").update(bytes).digest("hex");

function sha256File(path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const hash = createHash("sha256");
    createReadStream(path)
      .on("data", (chunk) => hash.update(chunk))
      .once("error", reject)
      .once("end", () => resolve(hash.digest("hex")));
  });
}
