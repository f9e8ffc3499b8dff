/**
 * `platform registry login`: logs the image builder in to the workspace's image registry, in the
 * builder's own session file (docker: config.json; buildah and podman: containers' auth.json), so
 * `platform publish` and the builder's own commands share one session (docs/publish.md,
 * "Registry login"). The password comes on stdin only (`--password-stdin`): an argument would show
 * in `ps` and the shell's history.
 *
 * Without --username, against a registry that trusts the platform (Docker Distribution's token
 * auth with the gateway's /auth/registry-token as its realm, docs/publish.md "Registry tokens"),
 * the builder is logged in with the CLI's own short-lived credential (a CLI token, renewed by
 * `platform auth login`), as `aws ecr get-login-password` does: the registry only ever sees the
 * org-scoped JWTs the gateway trades it for.
 */
import { type Command, Option } from "commander";
import { loadToolSettings } from "../settings/tools.ts";
import { ApiClient } from "../client/api.ts";
import { normalizeBaseUrl } from "../client/credentials.ts";
import { CliError } from "./common/errors.ts";
import { BUILDERS, type Builder, findBuilder, loginBuilder } from "../container-images/build.ts";
import {
  askImageRegistry,
  authFilesOf,
  imageRegistryHost,
  isPlainHttp,
  tokenRealm,
} from "../container-images/session.ts";
import { printJson } from "./common/output.ts";
import { registerRegistryCredentials } from "./registry-credentials.ts";
import { findWorkspace, WORKSPACE_FILE, workspaceSettings } from "../workspace/find.ts";

type Options = { username?: string; passwordStdin?: boolean; builder?: Builder; json?: boolean };

/** All of stdin, without the one line ending `echo` and most password managers add. */
async function readPassword(): Promise<string> {
  if (process.stdin.isTTY)
    throw new CliError(
      "--password-stdin: pipe the password in, e.g. `cat password.txt | platform registry login …`",
      2,
    );
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  const password = Buffer.concat(chunks)
    .toString("utf8")
    .replace(/\r?\n$/, "");
  if (password === "") throw new CliError("--password-stdin: stdin was empty; pipe the password in", 2);
  return password;
}

/**
 * The CLI's own credential as the builder's password, for a registry whose token server is this
 * platform's (its realm under the platform's URL); refused for any other realm, which must never
 * see a platform credential.
 */
async function platformCredentials(
  host: string,
  plainHttp: boolean,
): Promise<{ username: string; password: string; platform: string }> {
  const realm = await tokenRealm(host, plainHttp);
  const api = await ApiClient.fromCredentials();
  const platform = normalizeBaseUrl(api.baseUrl);
  if (!realm.startsWith(`${platform}/auth/registry-token`))
    throw new CliError(
      `${host} takes tokens from ${realm}, not from ${platform}: log in with --username <user> --password-stdin`,
    );
  return { username: "platform", password: await api.bearer(), platform };
}

export function registerImageRegistry(program: Command): void {
  const registry = program.command("registry").description("the image registry `platform publish` pushes to");
  registerRegistryCredentials(registry, readPassword);
  registry
    .command("login [host]")
    .description("log the image builder in to the workspace's image registry (default: imageRepository's host)")
    .option("--username <user>", "the image registry's user (with --password-stdin); without it, the platform's token")
    .option("--password-stdin", "read the password from stdin")
    .addOption(
      new Option("--builder <builder>", "the image builder (default: build.builder, else the first installed)").choices(
        BUILDERS,
      ),
    )
    .option("--json", "print the outcome as JSON")
    .action(async (hostArg: string | undefined, opts: Options) => {
      if (opts.passwordStdin && opts.username === undefined)
        throw new CliError("--password-stdin needs --username <user>", 2);
      if (opts.username !== undefined && !opts.passwordStdin)
        throw new CliError(
          "--username needs --password-stdin: pipe the password in (never on the command line, where `ps` shows it)",
          2,
        );
      // A named host needs no workspace (a CI job logging in before it checks out); otherwise its imageRepository's.
      const found = await findWorkspace();
      const settings = found && workspaceSettings(found);
      const repository = settings?.imageRepository;
      const host = hostArg ?? (repository && imageRegistryHost(repository));
      if (!host)
        throw new CliError(
          found
            ? `no registry to log in to: name one, or add "imageRepository" to ${found.file}`
            : `no registry to log in to: name one (platform registry login <host>), or run it in a workspace (${WORKSPACE_FILE})`,
          2,
        );
      const builder = await findBuilder(opts.builder ?? settings?.build.builder);
      const plainHttp = isPlainHttp(host, settings?.registryUrl);
      const credentials =
        opts.username === undefined
          ? await platformCredentials(host, plainHttp)
          : { username: opts.username, password: await readPassword(), platform: undefined };
      const authFile = authFilesOf(builder, loadToolSettings()).writes;
      await loginBuilder(builder, host, credentials, { plainHttp, authFile });
      // The builder checked the password; asking the registry here says what publish will see.
      const answer = await askImageRegistry(host, { plainHttp, credentials });
      if (answer.status !== "ok")
        throw new CliError(
          `${builder} logged in to ${host}, but GET ${answer.url} with the session answers ${answer.status === "unauthorized" ? "401" : answer.message}; check the registry's authentication (${WORKSPACE_FILE}: imageRepository)`,
        );
      const outcome = { host, username: credentials.username, builder, auth_file: authFile };
      if (opts.json) return printJson(outcome);
      console.log(
        opts.username === undefined
          ? `logged in to ${host} through ${credentials.platform} (${builder}; session in ${authFile}, valid while your platform sign-in is)`
          : `logged in to ${host} as ${opts.username} (${builder}; session in ${authFile})`,
      );
    });
}
