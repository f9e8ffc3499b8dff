/**
 * `platform publish`: the flags, then src/publish/publish.ts builds, pushes and records the
 * workspace's service image (docs/publish.md); the record is printed.
 */
import { type Command, InvalidArgumentError, Option } from "commander";
import { BUILDERS, type Builder } from "../container-images/build.ts";
import { publishImage } from "../publish/publish.ts";
import { printJson } from "./common/output.ts";

const BUILD_ARG = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/s;

type Options = { allowDirty?: boolean; builder?: Builder; buildArg: Record<string, string>; json?: boolean };

/** `--build-arg NAME=value`, repeatable: collected into one record, a later NAME over an earlier one. */
function buildArg(text: string, all: Record<string, string>): Record<string, string> {
  const m = BUILD_ARG.exec(text);
  if (!m) throw new InvalidArgumentError("expected NAME=value, such as NODE_IMAGE=node:24-slim");
  return { ...all, [m[1] as string]: m[2] as string };
}

export function registerPublish(program: Command): void {
  program
    .command("publish")
    .description(
      "build the service's image, tag it <version>-<short git sha>, push it to the workspace's image repository and record it with the platform",
    )
    .option("--allow-dirty", "publish a tree with uncommitted changes, tagged <version>-<sha>-dirty")
    .addOption(
      new Option("--builder <builder>", "the image builder (default: build.builder, else the first installed)").choices(
        BUILDERS,
      ),
    )
    .option(
      "--build-arg <NAME=value>",
      "a build argument, added to .platformrc.json's build.args (repeatable)",
      buildArg,
      {} as Record<string, string>,
    )
    .option("--json", "print the image record as JSON")
    .action(async (opts: Options) => {
      const record = await publishImage({
        allowDirty: opts.allowDirty ?? false,
        ...(opts.builder ? { builder: opts.builder } : {}),
        buildArgs: opts.buildArg,
        note: (line) => console.error(line),
      });
      if (opts.json) return printJson(record);
      console.log(`pushed ${record.repository}:${record.tag}@${record.digest}`);
      const protos = record.protos.map((p) => `${p.package}@${p.version}`).join(", ");
      console.log(
        `recorded ${record.service}:${record.tag} in organization ${record.org}${protos ? ` (implements ${protos})` : ""}`,
      );
    });
}
