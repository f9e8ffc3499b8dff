/**
 * The proto catalog from the workspace's side (docs/protos.md): `publish` builds each package's
 * descriptor set with buf, refuses a change that breaks the package's previous version (buf breaking
 * against that version's descriptor set, fetched from the catalog) unless allowed, and sends the descriptor set
 * and the sources; `fetch` writes a version back, confined to the directory it is given.
 */
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { decodeDescriptorSet } from "./descriptors.ts";
import { nextSemver, ProtoFilePath, ProtoPackageName, ProtoVersionName } from "./names.ts";
import type { ProtoPackage, PublicProtoVersion } from "./record.ts";
import {
  bufFailure,
  type Finding,
  formatFinding,
  type ProtoWorkspace,
  parseBufFindings,
  runBuf,
  workspacePath,
} from "./buf.ts";
import { CommandError } from "../process/command-error.ts";
import { lintProtos } from "./lint.ts";

/** The platform's HTTP API as the catalog uses it: the CLI's ApiClient, signed in to the workspace's organization. */
export type CatalogApi = {
  readonly baseUrl: string;
  send(method: string, path: string): Promise<Response>;
  request<T>(method: string, path: string, body?: unknown): Promise<T>;
};

const sha256 = (bytes: Uint8Array | string) => createHash("sha256").update(bytes).digest("hex");

const versionsPath = (pkg: string) => `/admin/v1/protos/${encodeURIComponent(pkg)}/versions`;

/** A GET through the client; undefined for a 404 (a package not published yet), the server's message otherwise. */
async function download(api: CatalogApi, path: string): Promise<Buffer | undefined> {
  const res = await api.send("GET", path);
  if (res.status === 404) return undefined;
  const body = Buffer.from(await res.arrayBuffer());
  if (res.ok) return body;
  let error: { message?: string; code?: string } | undefined;
  try {
    error = (JSON.parse(body.toString()) as { error?: typeof error }).error;
  } catch {
    // Not the API's envelope: the status says enough.
  }
  throw new CommandError(
    `GET ${path}: ${error?.message ?? `HTTP ${res.status}`}${error?.code ? ` (${error.code})` : ""}`,
  );
}

async function downloadJson<T>(api: CatalogApi, path: string): Promise<T | undefined> {
  const body = await download(api, path);
  return body === undefined ? undefined : (JSON.parse(body.toString()) as T);
}

export type PublishOutcome = {
  package: string;
  /** The version published, or the latest when nothing changed. */
  version: string;
  status: "published" | "unchanged";
  /** The version it was checked against, if any. */
  previous?: string;
  /** buf breaking's findings against `previous` (published only with --allow-breaking). */
  breaking: Finding[];
};

type Plan = PublishOutcome & { image: Buffer; files: { path: string; content: string }[] };

/** The workspace's packages and their files (module-relative names), from a descriptor set without imports. */
async function packagesOf(ws: ProtoWorkspace): Promise<Map<string, string[]>> {
  const run = await runBuf(["build", "--exclude-imports", "--error-format", "json", "-o", "-"], ws.root);
  if (run.code !== 0) throw bufFailure("buf build", run);
  const packages = new Map<string, string[]>();
  for (const file of decodeDescriptorSet(run.stdout).file)
    packages.set(file.package, [...(packages.get(file.package) ?? []), file.name]);
  return new Map([...packages].sort(([a], [b]) => a.localeCompare(b)));
}

/** The rule sets, as the refusal names them: which rules decided is part of the answer. */
function ruleSets(ws: ProtoWorkspace): string {
  return `${ws.breaking.join(", ")} from buf.yaml's breaking.use`;
}

async function plan(
  ws: ProtoWorkspace,
  api: CatalogApi,
  tmp: string,
  pkg: string,
  names: string[],
  options: { version?: string; allowBreaking: boolean },
): Promise<Plan> {
  const paths = names.map((n) => workspacePath(ws, n));
  // The package's files and everything they import: a descriptor set that reads and transcodes alone.
  const image = join(tmp, `${pkg}.binpb`);
  const build = await runBuf(
    ["build", "--error-format", "json", "-o", image, ...paths.flatMap((p) => ["--path", p])],
    ws.root,
  );
  if (build.code !== 0) throw bufFailure(`buf build of ${pkg}`, build);
  const files = await Promise.all(
    names.map(async (name, i) => ({ path: name, content: await readFile(join(ws.root, paths[i] as string), "utf8") })),
  );
  const versions = await downloadJson<{ data: PublicProtoVersion[] }>(api, versionsPath(pkg));
  const latest = versions?.data[0];
  const base = { package: pkg, image: await readFile(image), files, breaking: [] as Finding[] };
  if (!latest) return { ...base, version: options.version ?? nextSemver(undefined, "minor"), status: "published" };

  const same =
    latest.files.length === files.length &&
    files.every((f) => latest.files.some((l) => l.path === f.path && l.sha256 === sha256(f.content)));
  if (same && options.version === undefined)
    return { ...base, version: latest.version, status: "unchanged", previous: latest.version };

  const against = join(tmp, `${pkg}-${latest.version}.binpb`);
  const previous = await download(api, `${versionsPath(pkg)}/${latest.version}/image`);
  if (!previous) throw new CommandError(`${pkg}@${latest.version}: its image is gone from the proto catalog`);
  await writeFile(against, previous);
  const check = await runBuf(
    ["breaking", "--against", against, "--exclude-imports", "--error-format", "json"],
    ws.root,
  );
  if (check.code !== 0 && check.code !== 100) throw bufFailure("buf breaking", check);
  const breaking = parseBufFindings(check.stdout.toString());
  const bump = breaking.length > 0 && options.allowBreaking ? "major" : "minor";
  return {
    ...base,
    version: options.version ?? nextSemver(latest.version, bump),
    status: "published",
    previous: latest.version,
    breaking,
  };
}

/** Lints, plans every package, refuses if any breaks its previous version, then publishes them in order. */
export async function publish(
  ws: ProtoWorkspace,
  api: CatalogApi,
  options: { version?: string; allowBreaking: boolean },
): Promise<PublishOutcome[]> {
  const { findings } = await lintProtos(ws);
  if (findings.length > 0)
    throw new CommandError(
      `the protos do not lint clean; fix these first (\`platform proto lint\`):\n${findings.map(formatFinding).join("\n")}`,
    );
  if (ws.files.length === 0) throw new CommandError(`no .proto files in ${ws.modules.join(", ")}: nothing to publish`);
  if (ws.orgId !== undefined) {
    const me = await api.request<{ org: string }>("GET", "/admin/v1/whoami");
    if (me.org !== ws.orgId)
      throw new CommandError(
        `${ws.configFile} names organization "${ws.orgId}", but your credentials for ${api.baseUrl} are for "${me.org}": sign in to ${ws.orgId} (platform auth login) or correct orgId`,
      );
  }
  const tmp = await mkdtemp(join(tmpdir(), "platform-publish-"));
  try {
    const plans: Plan[] = [];
    for (const [pkg, names] of await packagesOf(ws)) plans.push(await plan(ws, api, tmp, pkg, names, options));
    const refused = plans.filter((p) => p.breaking.length > 0 && !options.allowBreaking);
    if (refused.length > 0)
      throw new CommandError(
        refused
          .map(
            (p) =>
              `${p.package}: ${p.breaking.length} breaking change${p.breaking.length === 1 ? "" : "s"} against ${p.previous} (buf breaking, rules ${ruleSets(ws)}):\n` +
              `${p.breaking.map(formatFinding).join("\n")}\n` +
              `undo ${p.breaking.length === 1 ? "it" : "them"}, or publish ${p.package}@${nextSemver(p.previous, "major")} with --allow-breaking`,
          )
          .join("\n"),
      );
    for (const p of plans) {
      if (p.status === "unchanged") continue;
      await api.request("POST", versionsPath(p.package), {
        version: p.version,
        image: p.image.toString("base64"),
        files: p.files,
        allow_breaking: p.breaking.length > 0,
      });
    }
    return plans.map(({ image: _, files: __, ...outcome }) => outcome);
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

export async function publishedPackages(api: CatalogApi): Promise<ProtoPackage[]> {
  return (await api.request<{ data: ProtoPackage[] }>("GET", "/admin/v1/protos")).data;
}

export async function publishedVersions(api: CatalogApi, pkg: string): Promise<PublicProtoVersion[]> {
  return (await api.request<{ data: PublicProtoVersion[] }>("GET", versionsPath(pkg))).data;
}

/** `<package>[@version]`, checked before anything is asked (exit 2 for a malformed one). */
export function parseSpec(spec: string): { pkg: string; version: string } {
  const at = spec.lastIndexOf("@");
  const [pkg, version] = at < 0 ? [spec, "latest"] : [spec.slice(0, at), spec.slice(at + 1)];
  const p = ProtoPackageName.safeParse(pkg);
  if (!p.success) throw new CommandError(`<package>: ${p.error.issues[0]?.message}`, 2);
  if (version !== "latest") {
    const v = ProtoVersionName.safeParse(version);
    if (!v.success) throw new CommandError(`@<version>: ${v.error.issues[0]?.message}`, 2);
  }
  return { pkg, version };
}

/**
 * `out/<path>` for a path the server sent, or an error: every path is checked against the form
 * the proto catalog stores, then again as a path, so no answer can write outside `out`.
 */
function confined(out: string, path: string): string {
  if (!ProtoFilePath.safeParse(path).success) throw new CommandError(`the proto catalog sent an unsafe path: ${path}`);
  const target = resolve(out, path);
  const rel = relative(out, target);
  if (rel === "" || isAbsolute(rel) || rel === ".." || rel.startsWith(`..${sep}`))
    throw new CommandError(`the proto catalog sent a path outside ${out}: ${path}`);
  return target;
}

/** Writes a version's sources (at their paths) and its descriptor set (`<package>-<version>.binpb`) under `out`. */
export async function fetchVersion(api: CatalogApi, spec: string, outDir: string): Promise<{ written: string[] }> {
  const { pkg, version } = parseSpec(spec);
  const out = resolve(outDir);
  const record = await api.request<PublicProtoVersion>("GET", `${versionsPath(pkg)}/${version}`);
  // The descriptor set's name is made of the version the server sent: checked like the paths.
  if (!ProtoVersionName.safeParse(record.version).success)
    throw new CommandError(`the proto catalog sent an invalid version: ${record.version}`);
  const base = `${versionsPath(pkg)}/${record.version}`;
  const downloads: { target: string; bytes: Buffer }[] = [];
  for (const file of record.files) {
    const target = confined(out, file.path);
    const url = `${base}/files/${file.path.split("/").map(encodeURIComponent).join("/")}`;
    const bytes = await download(api, url);
    if (!bytes || sha256(bytes) !== file.sha256)
      throw new CommandError(`${pkg}@${record.version}: ${file.path} does not match its recorded sha256`);
    downloads.push({ target, bytes });
  }
  const image = await download(api, `${base}/image`);
  if (!image || sha256(image) !== record.image.sha256)
    throw new CommandError(`${pkg}@${record.version}: the image does not match its recorded sha256`);
  downloads.push({ target: join(out, `${pkg}-${record.version}.binpb`), bytes: image });
  // Everything is checked before anything is written: a failed fetch leaves `out` as it was.
  for (const d of downloads) {
    await mkdir(dirname(d.target), { recursive: true });
    await writeFile(d.target, d.bytes);
  }
  return { written: downloads.map((d) => relative(process.cwd(), d.target) || d.target) };
}
