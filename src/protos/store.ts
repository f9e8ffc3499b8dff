/**
 * The proto catalog: per organization, package and version, the built descriptor set (a binary
 * FileDescriptorSet with source info) and the package's source files. Records in Redis (record.ts;
 * bounded per organization and package by settings.protos), bytes in the artifact store under
 * `protos/<org>/<package>/<version>/<upload>/` (`image.binpb`, `sources/<path>`). A version is
 * immutable: publishing one that exists is a 409, and nothing here deletes one. Everything is
 * addressed within one organization, so another organization's packages are not found, not refused.
 */
import { createHash, randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import { buffer } from "node:stream/consumers";
import { PlatformError, withDetail } from "../contracts/errors.ts";
import type { Control } from "../redis/connection.ts";
import { LuaScript } from "../redis/scripts.ts";
import { parseStored } from "../redis/stored.ts";
import type { ObjectStore } from "../storage/index.ts";
import { decodeDescriptorSet, type PackageSummary, summarizePackage } from "./descriptors.ts";
import { compareVersions } from "./names.ts";
import { ProtoPackage, ProtoVersion } from "./record.ts";

const publishScript = new LuaScript(import.meta.url, "publish");

export type ProtoLimits = { maxPackages: number; maxVersions: number };
export type ProtoCatalog = { ctl: Control; artifacts: ObjectStore; limits: ProtoLimits };

export type PublishInput = {
  package: string;
  version: string;
  image: Uint8Array;
  files: { path: string; content: string }[];
  allowBreaking: boolean;
};

const sha256 = (bytes: Uint8Array | string) => createHash("sha256").update(bytes).digest("hex");

function prefixOf(record: Pick<ProtoVersion, "org" | "package" | "version" | "upload">): string {
  return `protos/${record.org}/${record.package}/${record.version}/${record.upload}`;
}

function invalid(code: string, message: string, param: string): PlatformError {
  return new PlatformError(400, code, message, param);
}

function packageNotFound(pkg: string): PlatformError {
  return new PlatformError(
    404,
    "proto_package_not_found",
    `no proto package "${pkg}" in your organization; \`platform proto list\` shows its packages`,
    "package",
  );
}

function versionExists(pkg: string, version: string): PlatformError {
  return new PlatformError(
    409,
    "proto_version_exists",
    `${pkg}@${version} is already published and versions never change; publish another version (\`platform proto versions ${pkg}\` lists them)`,
    "version",
  );
}

/**
 * Checks what a publish sends against itself: the descriptor set decodes, holds every file its files
 * import (so it can be read and used to transcode alone), and its files of the package are
 * exactly the sources sent. Returns what the package declares.
 */
function checkUpload(input: PublishInput): PackageSummary {
  let summary: PackageSummary;
  try {
    summary = summarizePackage(decodeDescriptorSet(input.image), input.package);
  } catch (e) {
    throw invalid(
      "invalid_image",
      `image: not a self-contained FileDescriptorSet of package ${input.package} (${(e as Error).message}); build it with \`buf build -o image.binpb\``,
      "image",
    );
  }
  const sent = input.files.map((f) => f.path);
  if (new Set(sent).size !== sent.length) throw invalid("invalid_request", "files: a path is sent twice", "files");
  const missing = summary.files.filter((p) => !sent.includes(p));
  const extra = sent.filter((p) => !summary.files.includes(p));
  if (missing.length > 0 || extra.length > 0)
    throw invalid(
      "sources_mismatch",
      `files: the sources must be the image's files of package ${input.package}${missing.length > 0 ? `; missing ${missing.join(", ")}` : ""}${extra.length > 0 ? `; not in the image as ${input.package}: ${extra.join(", ")}` : ""}`,
      "files",
    );
  return summary;
}

export async function publishVersion(
  reg: ProtoCatalog,
  org: string,
  publisher: { id: string; name: string },
  input: PublishInput,
): Promise<ProtoVersion> {
  const summary = checkUpload(input);
  const { ctl } = reg;
  const versionsKey = ctl.keys.protoVersions(`${org}/${input.package}`);
  // Checked before the upload, so the usual conflict costs no writes; the script decides races.
  if (await ctl.redis.hexists(versionsKey, input.version)) throw versionExists(input.package, input.version);
  const record: ProtoVersion = {
    package: input.package,
    version: input.version,
    org,
    created: Math.floor(Date.now() / 1000),
    published_by: publisher,
    allow_breaking: input.allowBreaking,
    image: { size: input.image.byteLength, sha256: sha256(input.image) },
    files: input.files.map((f) => ({ path: f.path, size: Buffer.byteLength(f.content), sha256: sha256(f.content) })),
    service_names: summary.services.map((s) => s.full_name),
    upload: randomBytes(8).toString("hex"),
  };
  const prefix = prefixOf(record);
  const objects: [string, Uint8Array | string][] = [
    [`${prefix}/image.binpb`, input.image],
    ...input.files.map((f): [string, string] => [`${prefix}/sources/${f.path}`, f.content]),
  ];
  // An upload that is not recorded is removed. Not when the script's answer is lost, though: it may
  // have recorded the version, whose objects must then stay (an orphan costs only its bytes).
  const discard = () => Promise.all(objects.map(([key]) => reg.artifacts.delete(key).catch(() => undefined)));
  try {
    for (const [key, body] of objects) await reg.artifacts.put(key, body);
  } catch (e) {
    await discard();
    throw e;
  }
  const outcome = await publishScript.run(
    ctl.redis,
    [ctl.keys.protoPackages(org), versionsKey],
    [
      input.package,
      input.version,
      JSON.stringify(record),
      reg.limits.maxPackages,
      reg.limits.maxVersions,
      record.created,
    ],
  );
  if (outcome === "ok") return record;
  await discard();
  if (outcome === "exists") throw versionExists(input.package, input.version);
  const [what, setting, limit] =
    outcome === "too_many_packages"
      ? ["packages in an organization", "PLATFORM_MAX_PROTO_PACKAGES", reg.limits.maxPackages]
      : [`versions of ${input.package}`, "PLATFORM_MAX_PROTO_VERSIONS", reg.limits.maxVersions];
  throw new PlatformError(
    409,
    "proto_limit_reached",
    `the proto catalog holds at most ${limit} ${what} (${setting}); ask the operator to raise it`,
  );
}

/** The organization's packages, by name. */
export async function listPackages(reg: ProtoCatalog, org: string): Promise<ProtoPackage[]> {
  const key = reg.ctl.keys.protoPackages(org);
  return Object.entries(await reg.ctl.redis.hgetall(key))
    .flatMap(([name, raw]) => {
      const parsed = parseStored(ProtoPackage, raw, "proto_package", `${key}/${name}`);
      return parsed.ok ? [parsed.value] : [];
    })
    .sort((a, b) => a.package.localeCompare(b.package));
}

/** A package's versions, the highest first; a package the organization does not have is a 404. */
export async function listVersions(reg: ProtoCatalog, org: string, pkg: string): Promise<ProtoVersion[]> {
  const key = reg.ctl.keys.protoVersions(`${org}/${pkg}`);
  const all = await reg.ctl.redis.hgetall(key);
  if (Object.keys(all).length === 0) throw packageNotFound(pkg);
  return Object.entries(all)
    .flatMap(([version, raw]) => {
      const parsed = parseStored(ProtoVersion, raw, "proto_version", `${key}/${version}`);
      return parsed.ok ? [parsed.value] : [];
    })
    .sort((a, b) => compareVersions(b.version, a.version));
}

/** One version, or `latest` (the highest); 404 for a package or version the organization does not have. */
export async function getVersion(reg: ProtoCatalog, org: string, pkg: string, version: string): Promise<ProtoVersion> {
  const { ctl } = reg;
  let name = version;
  if (version === "latest") {
    const raw = await ctl.redis.hget(ctl.keys.protoPackages(org), pkg);
    const parsed = raw === null ? undefined : parseStored(ProtoPackage, raw, "proto_package", `${org}/${pkg}`);
    if (!parsed?.ok) throw packageNotFound(pkg);
    name = parsed.value.latest;
  }
  const key = ctl.keys.protoVersions(`${org}/${pkg}`);
  const raw = await ctl.redis.hget(key, name);
  if (raw === null) {
    if ((await ctl.redis.exists(key)) === 0) throw packageNotFound(pkg);
    throw new PlatformError(
      404,
      "proto_version_not_found",
      `${pkg} has no version ${name}; \`platform proto versions ${pkg}\` lists them`,
      "version",
    );
  }
  const parsed = parseStored(ProtoVersion, raw, "proto_version", `${key}/${name}`);
  if (!parsed.ok)
    throw withDetail(
      new PlatformError(500, "invalid_record", `the record of ${pkg}@${name} does not parse`),
      parsed.invalid,
    );
  return parsed.value;
}

export async function readDescriptorSet(reg: ProtoCatalog, record: ProtoVersion): Promise<Buffer> {
  return buffer(await reg.artifacts.get(`${prefixOf(record)}/image.binpb`));
}

/** What the version declares, read from its image. */
export async function describeVersion(reg: ProtoCatalog, record: ProtoVersion): Promise<PackageSummary> {
  return summarizePackage(decodeDescriptorSet(await readDescriptorSet(reg, record)), record.package);
}

/** One of the version's source files; a path it does not have is a 404. */
export async function readSource(reg: ProtoCatalog, record: ProtoVersion, path: string): Promise<Readable> {
  if (!record.files.some((f) => f.path === path))
    throw new PlatformError(
      404,
      "proto_file_not_found",
      `${record.package}@${record.version} has no file ${path}; its version record lists its files`,
      "path",
    );
  return reg.artifacts.get(`${prefixOf(record)}/sources/${path}`);
}
