/** The DoctorContext checks share (check.ts): each part looked up once, on first use, whichever check asks first. */
import { execFile } from "node:child_process";
import type { CliSettings } from "../../settings/cli.ts";
import type { ToolSettings } from "../../settings/tools.ts";
import { ApiClient } from "../../client/api.ts";
import { findCredentials } from "../../client/credentials.ts";
import { CliError } from "../common/errors.ts";
import { probePlatform } from "../common/probe.ts";
import { findWorkspace, workspaceSettings } from "../../workspace/find.ts";
import type { Caller, DoctorContext, ExecResult } from "./check.ts";

/** Long enough for `git status` in a large tree; a hung tool must not hang doctor. */
const EXEC_TIMEOUT_MS = 15_000;

function once<T>(make: () => Promise<T>): () => Promise<T> {
  let made: Promise<T> | undefined;
  return () => {
    made ??= make();
    return made;
  };
}

/** In the current directory, where the commands it checks for run (they find the workspace and platform from it). */
export function doctorContext(cli: CliSettings, tools: ToolSettings): DoctorContext {
  const cwd = process.cwd();
  const workspace = once(async () => {
    const found = await findWorkspace(cwd);
    return found && { ...found, settings: workspaceSettings(found) };
  });
  const platform = once(async () => {
    const { base_url, credentials } = await findCredentials(cli);
    return { url: base_url, credentials };
  });
  const probe = once(async () => {
    const { url } = await platform();
    return url === undefined ? undefined : probePlatform(url);
  });
  const api = once(async () => {
    const { credentials } = await platform();
    return credentials && new ApiClient(credentials, cli);
  });
  const whoami = once(async (): Promise<Caller> => {
    const client = await api();
    if (!client) throw new CliError("no credentials");
    const res = await client.send("GET", "/admin/v1/whoami");
    const body = (await res.json().catch(() => ({}))) as Caller & { error?: { code?: string; message?: string } };
    if (!res.ok)
      throw new CliError(
        `${client.baseUrl} refused the credentials: HTTP ${res.status}${body.error ? ` (${body.error.code ?? body.error.message})` : ""}`,
      );
    return body;
  });
  const exec = (command: string, args: string[], dir = cwd) =>
    new Promise<ExecResult | undefined>((resolve) =>
      execFile(command, args, { cwd: dir, timeout: EXEC_TIMEOUT_MS }, (error, stdout, stderr) => {
        if ((error as NodeJS.ErrnoException | null)?.code === "ENOENT") return resolve(undefined);
        const code = error ? (typeof error.code === "number" ? error.code : 1) : 0;
        resolve({ code, stdout: String(stdout), stderr: String(stderr) });
      }),
    );
  return { cwd, cli, tools, workspace, platform, probe, api, whoami, exec };
}
