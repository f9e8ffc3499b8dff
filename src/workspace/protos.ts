/**
 * The workspace's protos: the proto root and language its `.platformrc.json` names, with the
 * `buf.yaml` beside it (src/protos/buf.ts reads that), and the lint `platform doctor` runs on them.
 */
import { CommandError } from "../process/command-error.ts";
import { insideRoot, type ProtoWorkspace, readProtoWorkspace } from "../protos/buf.ts";
import { type LintReport, lintProtos } from "../protos/lint.ts";
import { findWorkspace, WORKSPACE_FILE, type Workspace, workspaceSettings } from "./find.ts";

/**
 * The workspace the proto commands work in: the nearest `.platformrc.json` (or `workspace`) and
 * its `buf.yaml`, which must exist: its rules are the ones checked.
 */
export async function protoWorkspace(workspace?: Workspace): Promise<ProtoWorkspace> {
  const ws = workspace ?? (await findWorkspace());
  if (!ws)
    throw new CommandError(
      `no ${WORKSPACE_FILE} in this directory or any above it: run \`platform init\` at your repository's root first`,
    );
  const { protoRoot, language } = workspaceSettings(ws);
  return readProtoWorkspace({
    root: ws.root,
    configFile: WORKSPACE_FILE,
    orgId: ws.config.orgId,
    protoRoot: insideRoot(protoRoot, `${WORKSPACE_FILE}: protoRoot`),
    language,
  });
}

/**
 * Lints the workspace's protos (src/protos/lint.ts). Throws a CommandError naming the fix where
 * there is no workspace (none given and none found from the current directory), no buf.yaml, or
 * buf fails for another reason. `platform doctor` calls this.
 */
export async function lintWorkspace(workspace?: Workspace): Promise<LintReport> {
  return lintProtos(await protoWorkspace(workspace));
}
