/**
 * Doctor's image checks (docs/publish.md): a builder present and working (docker, podman or
 * buildah; `build.builder` when the workspace names one), the workspace's image registry reachable
 * (`GET /v2/` answers 200 or 401, as a registry does), and the builder's session with it valid (the
 * same call with the stored credentials answers 200). None is required: nothing before
 * `platform publish` builds or pushes, and publish asks the same questions before it builds.
 */
import { BUILDER_INFO, BUILDERS, type Builder } from "../../container-images/build.ts";
import {
  authFilesOf,
  askImageRegistry,
  isPlainHttp,
  imageRegistryHost,
  storedSession,
} from "../../container-images/session.ts";
import { type CheckResult, type DoctorCheck, type DoctorContext, fail, ok, skip, warn } from "./check.ts";

type Found = { builder: Builder; version: string; works: boolean; why: string };

/**
 * The builder publish would use (image-build.ts, findBuilder): the named one, else the first
 * installed and working one, else the first installed (to say why it does not work).
 */
async function builderOf(ctx: DoctorContext): Promise<{ found?: Found; named?: Builder }> {
  const named = (await ctx.workspace().catch(() => undefined))?.settings.build.builder;
  let first: Found | undefined;
  for (const builder of named ? [named] : BUILDERS) {
    const ran = await ctx.exec(builder, ["--version"]);
    if (ran?.code !== 0) continue;
    const info = await ctx.exec(builder, BUILDER_INFO[builder]);
    const found = {
      builder,
      version: ran.stdout.trim().split("\n")[0] ?? builder,
      works: info?.code === 0,
      why: (info?.stderr || info?.stdout || "").trim().split("\n").slice(-2).join(" "),
    };
    if (found.works) return { found, ...(named ? { named } : {}) };
    first ??= found;
  }
  return { ...(first ? { found: first } : {}), ...(named ? { named } : {}) };
}

export const builderCheck: DoctorCheck = {
  id: "builder",
  name: "image builder",
  required: false,
  run: async (ctx) => {
    const { found, named } = await builderOf(ctx);
    if (!found)
      return fail(
        named
          ? `${named} (build.builder in .platformrc.json) is not installed`
          : `none of ${BUILDERS.join(", ")} is installed`,
        `install ${named ?? "one of them"}: \`platform publish\` builds images with it`,
      );
    const { builder, version, why } = found;
    if (!found.works) {
      return fail(
        `${version}: installed, but \`${builder} ${BUILDER_INFO[builder][0]}\` fails${why ? `: ${why}` : ""}`,
        builder === "docker"
          ? "start the docker daemon (or use podman or buildah: build.builder in .platformrc.json)"
          : `run \`${builder} info\` and mend what it says (buildah here: STORAGE_DRIVER=vfs where overlay is unavailable)`,
      );
    }
    return ok(`${version}, working (\`${builder} ${BUILDER_INFO[builder][0]}\` answers)`, { builder, version });
  },
};

/** The workspace's registry host and whether it is plain HTTP; a skip when there is none. */
async function registryOf(ctx: DoctorContext): Promise<{ host: string; plainHttp: boolean } | CheckResult> {
  const ws = await ctx.workspace().catch(() => undefined);
  const repository = ws?.settings.imageRepository;
  if (!ws || !repository) return skip("not checked: no image repository (above)");
  const host = imageRegistryHost(repository);
  return { host, plainHttp: isPlainHttp(host, ws.settings.registryUrl) };
}

export const imageRegistryCheck: DoctorCheck = {
  id: "image-registry",
  name: "image registry",
  required: false,
  run: async (ctx) => {
    const where = await registryOf(ctx);
    if (!("host" in where)) return where;
    const answer = await askImageRegistry(where.host, { plainHttp: where.plainHttp });
    const details = { host: where.host, url: answer.url };
    if (answer.status === "ok") return ok(`${answer.url} answers (open: no login needed)`, details);
    if (answer.status === "unauthorized") return ok(`${answer.url} answers (login needed)`, details);
    return fail(
      answer.status === "unreachable" ? `cannot reach ${answer.url} (${answer.message})` : answer.message,
      "check imageRepository in .platformrc.json and that the registry runs there",
      details,
    );
  },
};

export const imageSessionCheck: DoctorCheck = {
  id: "image-session",
  name: "image registry session",
  required: false,
  run: async (ctx) => {
    const where = await registryOf(ctx);
    if (!("host" in where)) return where;
    const builder = (await builderOf(ctx)).found?.builder;
    if (!builder) return skip("not checked: no image builder (above)");
    const { host, plainHttp } = where;
    const login = "run `platform registry login`";
    const stored = await storedSession(host, authFilesOf(builder, ctx.tools).reads);
    if (stored.kind === "none") return fail(`no ${builder} session with ${host}`, login, { host, builder });
    if (stored.kind === "helper")
      return warn(
        `not checked: ${builder} keeps the session with ${host} in docker-credential-${stored.helper}, which doctor does not query`,
        `if \`platform publish\` is refused, ${login}`,
      );
    const answer = await askImageRegistry(host, { plainHttp, credentials: stored });
    const details = { host, builder, file: stored.file, username: stored.username };
    if (answer.status === "ok") return ok(`${host} accepts ${stored.username}'s session (${stored.file})`, details);
    if (answer.status === "unauthorized")
      return fail(`${host} refuses the session in ${stored.file} (expired or changed password)`, login, details);
    return skip(`not checked: ${host} does not answer as a registry (above)`);
  },
};
