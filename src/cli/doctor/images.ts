/**
 * Doctor's image checks: a builder present (docker, podman or buildah; `build.builder` when the
 * workspace names one) and a session with the workspace's image registry in the files builders keep
 * them in. Presence only for now, so neither is required: nothing before `platform publish` builds.
 */
import { readFile } from "node:fs/promises";
import { BUILDERS } from "../platformrc.ts";
import { type DoctorCheck, fail, ok, skip, warn } from "./check.ts";

export const builderCheck: DoctorCheck = {
  id: "builder",
  name: "image builder",
  required: false,
  run: async (ctx) => {
    const named = (await ctx.workspace().catch(() => undefined))?.settings.build.builder;
    for (const builder of named ? [named] : BUILDERS) {
      const ran = await ctx.exec(builder, ["--version"]);
      if (ran?.code === 0) {
        const version = ran.stdout.trim().split("\n")[0] ?? "";
        return ok(`${builder}: ${version}`, { builder, version });
      }
    }
    return fail(
      named
        ? `${named} (build.builder in .platformrc.json) is not installed`
        : `none of ${BUILDERS.join(", ")} is installed`,
      `install ${named ?? "one of them"}: \`platform publish\` builds images with it`,
    );
  },
};

type AuthFile = { auths?: Record<string, unknown>; credHelpers?: Record<string, string>; credsStore?: string };

/** A key of `auths` as docker and podman write it: a host, or a URL of one (`https://index.docker.io/v1/`). */
const hostOf = (key: string) => key.replace(/^https?:\/\//, "").replace(/\/.*$/, "");

export const imageSessionCheck: DoctorCheck = {
  id: "image-registry",
  name: "image registry session",
  required: false,
  run: async (ctx) => {
    const repository = (await ctx.workspace().catch(() => undefined))?.settings.imageRepository;
    if (!repository) return skip("not checked: no image repository (above)");
    const host = repository.split("/")[0] as string;
    const login = `\`docker login ${host}\` (or podman login, buildah login)`;
    let store: string | undefined;
    for (const file of ctx.tools.registryAuthFiles) {
      const auth = await readFile(file, "utf8").then(
        (text) => JSON.parse(text) as AuthFile,
        () => undefined,
      );
      if (!auth) continue;
      if (Object.keys(auth.auths ?? {}).some((key) => hostOf(key) === host))
        return ok(`a session with ${host} in ${file}`, { host, file });
      const helper = auth.credHelpers?.[host];
      if (helper) return ok(`${host} signs in through docker-credential-${helper} (${file})`, { host, file, helper });
      store ??= auth.credsStore;
    }
    if (store)
      return warn(
        `not checked: sessions are kept by docker-credential-${store}, which doctor does not query`,
        `if \`platform publish\` is refused, ${login}`,
      );
    return fail(`no session with ${host} (${repository})`, login);
  },
};
