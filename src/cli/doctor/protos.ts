/** Doctor's protos check: the workspace's `.proto` files lint clean, as `platform proto lint` says. */
import { formatFinding } from "../../protos/buf.ts";
import { CliError } from "../common/errors.ts";
import { lintWorkspace } from "../../workspace/protos.ts";
import { type DoctorCheck, fail, ok, skip } from "./check.ts";

/** Findings shown under the failure, at most; `platform proto lint` lists them all. */
const SHOWN = 5;

export const protosCheck: DoctorCheck = {
  id: "protos",
  name: "protos lint",
  required: true,
  run: async (ctx) => {
    const ws = await ctx.workspace().catch(() => undefined);
    if (!ws) return skip("not checked: no valid workspace");
    let report: Awaited<ReturnType<typeof lintWorkspace>>;
    try {
      report = await lintWorkspace(ws);
    } catch (e) {
      if (e instanceof CliError) return fail(e.message, "run `platform proto lint` and mend what it says");
      throw e;
    }
    const { files, findings } = report;
    if (files.length === 0) return ok(`no .proto files under ${ws.settings.protoRoot}/ yet`, { files: 0 });
    if (findings.length === 0) return ok(`${files.length} file(s) clean`, { files: files.length });
    const shown = findings.slice(0, SHOWN).map(formatFinding).join("\n  ");
    const more = findings.length > SHOWN ? `\n  … and ${findings.length - SHOWN} more` : "";
    return fail(
      `${findings.length} finding(s) in ${files.length} file(s):\n  ${shown}${more}`,
      "mend them (`platform proto lint` lists each as path:line:column)",
      { files: files.length, findings: findings.length },
    );
  },
};
