/** Doctor's checks of local tools: buf from the CLI's own install, and git with a clean tree. */
import { bufBinary } from "../../protos/buf.ts";
import { type DoctorCheck, fail, ok } from "./check.ts";

export const bufCheck: DoctorCheck = {
  id: "buf",
  name: "buf",
  required: true,
  run: async (ctx) => {
    const fix = "reinstall the CLI's dependencies (`npm ci` where it is installed): @bufbuild/buf is one of them";
    let path: string;
    try {
      path = bufBinary();
    } catch (e) {
      return fail((e as Error).message, fix);
    }
    const ran = await ctx.exec(path, ["--version"]);
    if (!ran) return fail("buf is not installed with the CLI (@bufbuild/buf)", fix);
    if (ran.code !== 0) return fail(`${path} --version failed: ${(ran.stderr || ran.stdout).trim()}`, fix);
    const version = ran.stdout.trim();
    return ok(`buf ${version} (${path})`, { version, path });
  },
};

/** Not required: nothing before `platform publish` needs git, and a dirty tree is normal while working. */
export const gitCheck: DoctorCheck = {
  id: "git",
  name: "git",
  required: false,
  run: async (ctx) => {
    const git = await ctx.exec("git", ["--version"]);
    if (!git) return fail("git is not installed", "install git: `platform publish` tags images with the commit");
    const version = git.stdout.trim().replace(/^git version /, "");
    const dir = (await ctx.workspace().catch(() => undefined))?.root ?? ctx.cwd;
    const head = await ctx.exec("git", ["rev-parse", "--short", "HEAD"], dir);
    if (head?.code !== 0) {
      const inside = (await ctx.exec("git", ["rev-parse", "--is-inside-work-tree"], dir))?.code === 0;
      return inside
        ? fail(`git ${version}: no commit yet in ${dir}`, "commit: images are tagged <version>-<short commit>")
        : fail(
            `git ${version}: ${dir} is not in a git repository`,
            "`git init` and commit: images are tagged <version>-<short commit>",
          );
    }
    const sha = head.stdout.trim();
    const status = await ctx.exec("git", ["status", "--porcelain"], dir);
    const changed = (status?.stdout ?? "")
      .split("\n")
      .filter(Boolean)
      .map((line) => line.slice(3));
    const details = { version, commit: sha, changed };
    if (changed.length > 0)
      return fail(
        `git ${version}: ${changed.length} uncommitted change${changed.length > 1 ? "s" : ""} at ${sha} (${changed.slice(0, 3).join(", ")}${changed.length > 3 ? ", …" : ""})`,
        "commit or stash them: `platform publish` refuses a dirty tree",
        details,
      );
    return ok(`git ${version}, clean at ${sha}`, details);
  },
};
