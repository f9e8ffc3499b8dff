/**
 * What a `platform doctor` check is, and what it answers. A check is `{ id, name, required, run }`
 * in the list of checks.ts; `run` gets the shared DoctorContext (context.ts) and answers with
 * `ok`, `warn`, `fail` or `skip` below. A failure carries the fix, the command or change that
 * mends it, printed under it.
 */
import type { CliSettings } from "../../settings/cli.ts";
import type { ToolSettings } from "../../settings/tools.ts";
import type { ApiClient } from "../../client/api.ts";
import type { Credentials } from "../../client/credentials.ts";
import type { PlatformProbe } from "../common/probe.ts";
import type { Workspace, WorkspaceSettings } from "../../workspace/find.ts";

export type CheckStatus = "ok" | "warn" | "fail" | "skip";

type Details = Record<string, unknown>;

export type CheckResult = {
  status: CheckStatus;
  /** One line: what was found (`git 2.39.5, clean at 1a2b3c4`) or what is wrong. */
  summary: string;
  /** For a failure or a warning: what to run or change. */
  fix?: string;
  /** Facts for `--json` (versions, paths), never secrets. */
  details?: Details;
};

export type DoctorCheck = {
  /** Stable, for `--json` and scripts: `credentials`, `git`. */
  id: string;
  /** As the line shows it. */
  name: string;
  /** A required check that fails makes `platform doctor` exit 1; another's failure is shown as a warning. */
  required: boolean;
  /** Errors thrown are failures with their message; a check that takes too long fails too (index.ts). */
  run: (ctx: DoctorContext) => Promise<CheckResult>;
};

export type Caller = { name: string; org: string; role: string; operator: boolean; token?: { expires: number } };

/** What checks share, each part found once however many checks ask for it. */
export type DoctorContext = {
  cwd: string;
  cli: CliSettings;
  tools: ToolSettings;
  /** The workspace with its settings; undefined outside one; rejects with the file's error when it does not parse. */
  workspace: () => Promise<(Workspace & { settings: WorkspaceSettings }) | undefined>;
  /**
   * The platform commands here talk to (the workspace's, PLATFORM_BASE_URL, the credentials' default)
   * and its credentials; rejects when `.platformrc.json` or the credentials file does not parse.
   */
  platform: () => Promise<{ url: string | undefined; credentials: Credentials | undefined }>;
  /** The platform's `/healthz`; undefined without one. */
  probe: () => Promise<PlatformProbe | undefined>;
  /** The management API client for the platform's credentials; undefined without them. */
  api: () => Promise<ApiClient | undefined>;
  /** `GET /admin/v1/whoami` with the credentials; rejects with why they were not accepted. */
  whoami: () => Promise<Caller>;
  /** A program's exit code and output; undefined when it is not installed. */
  exec: (command: string, args: string[], cwd?: string) => Promise<ExecResult | undefined>;
};

export type ExecResult = { code: number; stdout: string; stderr: string };

const result = (status: CheckStatus, summary: string, fix?: string, details?: Details): CheckResult => ({
  status,
  summary,
  ...(fix ? { fix } : {}),
  ...(details ? { details } : {}),
});
export const ok = (summary: string, details?: Details) => result("ok", summary, undefined, details);
export const warn = (summary: string, fix: string, details?: Details) => result("warn", summary, fix, details);
export const fail = (summary: string, fix?: string, details?: Details) => result("fail", summary, fix, details);
/** Not applicable here (no Kubernetes backend), or not checkable because a check it needs failed. */
export const skip = (summary: string) => result("skip", summary);
