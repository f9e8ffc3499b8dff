/**
 * Publishing a service's image (docs/publish.md): builds the workspace's image, tags it
 * `<version>-<short sha>`, labels it with the OCI annotations, pushes it to the workspace's image
 * repository and records it with the platform. What can be checked in a second is checked before
 * the build, which takes minutes: the tree is clean, the platform accepts the credentials, the
 * image registry accepts the builder's session.
 */
import { access } from "node:fs/promises";
import { join } from "node:path";
import { ApiClient } from "../client/api.ts";
import { type Builder, buildImage, findBuilder, pushImage } from "../container-images/build.ts";
import type { ImageRecord } from "../container-images/record.ts";
import {
  askImageRegistry,
  authFilesOf,
  isPlainHttp,
  notLoggedIn,
  imageRegistryHost,
  storedSession,
} from "../container-images/session.ts";
import { CommandError } from "../process/command-error.ts";
import { loadToolSettings } from "../settings/tools.ts";
import { requireWorkspace, WORKSPACE_FILE } from "../workspace/find.ts";
import { commitOf, declaredPackages, versionOf } from "./source.ts";

export type PublishOptions = {
  allowDirty: boolean;
  /** The builder the command names; else the workspace's `build.builder`, else the first that works. */
  builder?: Builder;
  /** Added to (and over) the workspace's `build.args`. */
  buildArgs: Record<string, string>;
  /** A line for the user that is no error (a proto package not published yet). */
  note: (line: string) => void;
};

/** Each package at its latest published version; one not published yet is left out, with a note. */
async function implementedProtos(
  api: ApiClient,
  packages: string[],
  note: (line: string) => void,
): Promise<{ package: string; version: string }[]> {
  const found: { package: string; version: string }[] = [];
  for (const pkg of packages) {
    const res = await api.send("GET", `/admin/v1/protos/${encodeURIComponent(pkg)}/versions/latest`);
    if (res.status === 404) {
      note(
        `note: ${pkg} is not published to ${api.baseUrl}: the image record names no version of it (\`platform proto publish\`)`,
      );
      continue;
    }
    if (!res.ok) throw new CommandError(`GET the latest version of ${pkg}: HTTP ${res.status}`);
    found.push({ package: pkg, version: ((await res.json()) as { version: string }).version });
  }
  return found;
}

/** Fails unless the builder holds a session the image registry accepts (a credential helper is trusted: the push tells). */
async function checkSession(builder: Builder, host: string, plainHttp: boolean): Promise<void> {
  const stored = await storedSession(host, authFilesOf(builder, loadToolSettings()).reads);
  if (stored.kind === "helper") return;
  // Without a session, the registry may still be open (200): only its 401 means "log in".
  const answer = await askImageRegistry(host, {
    plainHttp,
    ...(stored.kind === "basic" ? { credentials: stored } : {}),
  });
  if (answer.status === "ok") return;
  if (answer.status === "unauthorized") throw new CommandError(notLoggedIn(host), 1, { plain: true });
  const what =
    answer.status === "unreachable"
      ? `cannot reach the image registry at ${answer.url} (${answer.message})`
      : answer.message;
  throw new CommandError(`${what}: check imageRepository in ${WORKSPACE_FILE} and that the registry runs there`);
}

/** Publishes the workspace at the current directory; answers the record the platform keeps. */
export async function publishImage(opts: PublishOptions): Promise<ImageRecord> {
  const ws = await requireWorkspace();
  const repository = ws.settings.imageRepository;
  if (!repository)
    throw new CommandError(
      `${ws.file}: no imageRepository, and none can be derived from registryUrl and the directory's name; add "imageRepository": "<host>[:<port>]/<path>"`,
      2,
    );
  const dockerfile = join(ws.root, "Dockerfile");
  await access(dockerfile).catch(() => {
    throw new CommandError(`no Dockerfile in ${ws.root}: \`platform service create\` writes one`);
  });
  const commit = await commitOf(ws.root);
  if (commit.changed.length > 0 && !opts.allowDirty)
    throw new CommandError(
      `the workspace has uncommitted changes: ${commit.changed.join(", ")}; commit or stash them, or publish with --allow-dirty (tagged -dirty)`,
    );
  const { version } = await versionOf(ws.root, ws.settings.language);
  const dirty = commit.changed.length > 0;
  const tag = `${version}-${commit.sha}${dirty ? "-dirty" : ""}`;
  const service = repository.split("/").at(-1) as string;
  const host = imageRegistryHost(repository);
  const plainHttp = isPlainHttp(host, ws.settings.registryUrl);

  const builder = await findBuilder(opts.builder ?? ws.settings.build.builder);
  await checkSession(builder, host, plainHttp);
  // Signed in only once the cheap local checks have passed.
  const api = await ApiClient.fromCredentials();
  const me = await api.request<{ org: string }>("GET", "/admin/v1/whoami");
  if (me.org !== ws.settings.orgId)
    throw new CommandError(
      `${WORKSPACE_FILE} names organization "${ws.settings.orgId}", but your credentials for ${api.baseUrl} are for "${me.org}": sign in to ${ws.settings.orgId} (platform auth login) or correct orgId`,
    );
  const packages = await declaredPackages(join(ws.root, ws.settings.protoRoot));
  const protos = await implementedProtos(api, packages, opts.note);

  const reference = `${repository}:${tag}`;
  await buildImage({
    builder,
    context: ws.root,
    dockerfile,
    reference,
    buildArgs: { ...ws.settings.build.args, ...opts.buildArgs },
    labels: {
      "org.opencontainers.image.version": version,
      "org.opencontainers.image.revision": commit.full,
      // A URL to the sources: the origin remote's, where there is one (none is better than a guess).
      ...(commit.source ? { "org.opencontainers.image.source": commit.source } : {}),
      "org.opencontainers.image.created": new Date().toISOString(),
      "org.opencontainers.image.title": service,
    },
  });
  const digest = await pushImage(builder, reference, { plainHttp, notLoggedIn: notLoggedIn(host) });
  return api.request<ImageRecord>("POST", "/admin/v1/images", {
    service,
    repository,
    tag,
    digest,
    git_sha: commit.sha,
    dirty,
    version,
    protos,
  });
}
