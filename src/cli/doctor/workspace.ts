/** Doctor's `.platformrc.json` check: found at or above the current directory, valid, and without keys this CLI does not know. */
import { readFile } from "node:fs/promises";
import { CliError } from "../common/errors.ts";
import { unknownKeys } from "../../workspace/config.ts";
import { WORKSPACE_FILE } from "../../workspace/find.ts";
import { type DoctorCheck, fail, ok, warn } from "./check.ts";

export const workspaceCheck: DoctorCheck = {
  id: "workspace",
  name: WORKSPACE_FILE,
  required: true,
  run: async (ctx) => {
    const ws = await ctx.workspace().catch((e: unknown) => {
      if (e instanceof CliError) return e;
      throw e;
    });
    if (ws instanceof CliError)
      return fail(
        ws.message,
        "correct the field it names (the keys: docs/workspace.md), or write the file again with `platform init --force`",
      );
    if (!ws)
      return fail(
        `no ${WORKSPACE_FILE} in ${ctx.cwd} or above it`,
        "run `platform init --registry-url <url> --org-id <id>` at the repository's root",
      );
    const s = ws.settings;
    const details = { file: ws.file, ...s };
    const unknown = unknownKeys(JSON.parse(await readFile(ws.file, "utf8")));
    if (unknown.length > 0)
      return warn(
        `${ws.file}: ${unknown.map((k) => `"${k}"`).join(", ")} ${unknown.length > 1 ? "are keys" : "is a key"} this CLI does not know (ignored)`,
        "correct a misspelt key, or update the CLI if a newer one wrote it (the keys: docs/workspace.md)",
      );
    if (!s.imageRepository)
      return warn(
        `${ws.file}: no imageRepository, and none can be derived from the registry's host and the directory's name`,
        `add "imageRepository": "<host>[:<port>]/<path>" to ${ws.file}`,
      );
    return ok(
      `${ws.file}: registry ${s.registryUrl}, organization ${s.orgId}, images ${s.imageRepository}, protos in ${s.protoRoot}/, ${s.language}`,
      details,
    );
  },
};
