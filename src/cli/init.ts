/**
 * `platform init`: makes a repository a workspace (src/workspace/init.ts writes its files). Before
 * writing anything it checks that `--registry-url` is a platform gateway and that the organization
 * exists (`--offline` skips both), asking on a terminal for an image repository it cannot derive.
 */
import { basename } from "node:path";
import { createInterface } from "node:readline/promises";
import type { Command } from "commander";
import { z } from "zod";
import { describeIssues } from "../contracts/issues.ts";
import { loadCliSettings } from "../settings/cli.ts";
import { ApiClient } from "../client/api.ts";
import { findCredentials, normalizeBaseUrl } from "../client/credentials.ts";
import { CliError } from "./common/errors.ts";
import { DEFAULT_LANGUAGE, DEFAULT_PROTO_ROOT, WorkspaceConfig } from "../workspace/config.ts";
import { deriveImageRepository } from "../workspace/find.ts";
import { createWorkspace, refuseExisting, workspaceRoot } from "../workspace/init.ts";
import { probeOrg, probePlatform } from "./common/probe.ts";

type InitFlags = {
  registryUrl: string;
  orgId: string;
  imageRepository?: string;
  lang: string;
  force?: boolean;
  offline?: boolean;
};

export function registerInit(program: Command): void {
  program
    .command("init")
    .description(
      "make this repository a workspace: .platformrc.json and buf.yaml at its root (the git root, else here), checked against the platform",
    )
    .requiredOption("--registry-url <url>", "the platform's base URL (its gateway), e.g. https://platform.example.com")
    .requiredOption("--org-id <id>", "the organization the workspace belongs to")
    .option(
      "--image-repository <repo>",
      "where `platform publish` pushes images, host[:port]/path (default: <platform host>/<org>/<directory name>)",
    )
    .option("--lang <language>", "node or python: what services and generated code are written in", DEFAULT_LANGUAGE)
    .option("--force", "replace an existing .platformrc.json and buf.yaml")
    .option("--offline", "skip checking the platform and the organization")
    .action(async (flags: InitFlags) => {
      const registryUrl = normalizeBaseUrl(checkFlag("--registry-url", "registryUrl", flags.registryUrl));
      const orgId = checkFlag("--org-id", "orgId", flags.orgId);
      const language = checkFlag("--lang", "language", flags.lang);
      const root = await workspaceRoot(process.cwd());
      await refuseExisting(root, flags.force ?? false);
      const imageRepository = checkFlag(
        "--image-repository",
        "imageRepository",
        flags.imageRepository ??
          deriveImageRepository(registryUrl, orgId, basename(root)) ??
          (await askImageRepository(registryUrl, root)),
      );

      const checked = flags.offline ? undefined : await checkPlatform(registryUrl, orgId);

      const files = await createWorkspace({
        root,
        registryUrl,
        orgId,
        imageRepository,
        language,
        force: flags.force ?? false,
      });

      console.log(
        `wrote ${files.config}: registry ${registryUrl}, organization ${orgId}, images ${imageRepository}, protos in ${DEFAULT_PROTO_ROOT}/, ${language}`,
      );
      console.log(`wrote ${files.buf}: the lint and breaking-change rules of \`platform proto lint\` and publishing`);
      if (files.protoDir) console.log(`created ${files.protoDir}/`);
      if (checked?.warning) console.error(`warning: ${checked.warning}`);
      else if (checked) console.log(`checked: ${checked.summary}`);
      else
        console.error(
          "warning: --offline: the platform and the organization were not checked; `platform doctor` checks them",
        );
      const signIn = checked?.summary ? "" : "`platform auth login`, ";
      console.log(
        `next: ${signIn}.proto files under ${DEFAULT_PROTO_ROOT}/, \`platform proto lint\`, \`platform doctor\``,
      );
    });
}

/** A flag through its key's schema, so it fails as the file would, but named as the flag (exit 2). */
function checkFlag<K extends "registryUrl" | "orgId" | "imageRepository" | "language">(
  flag: string,
  key: K,
  value: unknown,
): NonNullable<z.infer<(typeof WorkspaceConfig.shape)[K]>> {
  const parsed = WorkspaceConfig.shape[key].nonoptional().safeParse(value);
  if (!parsed.success)
    throw new CliError(describeIssues(new z.ZodError(parsed.error.issues.map((i) => ({ ...i, path: [flag] })))), 2);
  return parsed.data as NonNullable<z.infer<(typeof WorkspaceConfig.shape)[K]>>;
}

/**
 * `--registry-url` answers as a platform gateway, and the stored credentials see the organization.
 * Without credentials the organization cannot be checked: a warning, as signing in comes next.
 */
async function checkPlatform(url: string, orgId: string): Promise<{ summary?: string; warning?: string }> {
  const probe = await probePlatform(url);
  if (!probe.ok)
    throw new CliError(
      probe.problem === "unreachable"
        ? `${probe.message}: check --registry-url and that the platform runs there (--offline skips this check)`
        : `${probe.message}: --registry-url is the platform's base URL, e.g. https://platform.example.com (without /v1)`,
    );
  const cli = loadCliSettings();
  const { credentials } = await findCredentials(cli, url);
  if (!credentials)
    return {
      warning: `${url} is a platform gateway (${probe.version}), but organization "${orgId}" was not checked: no credentials for ${url}. Run \`platform auth login\`, then \`platform doctor\``,
    };
  const org = await probeOrg(new ApiClient(credentials, cli), orgId);
  if (!org.ok) throw new CliError(org.message);
  return { summary: `${url} is a platform gateway (${probe.version}); organization ${orgId} (${org.org.name}) exists` };
}

/** Asked on a terminal; elsewhere (a script, CI) the flag is the only way. */
async function askImageRepository(registryUrl: string, root: string): Promise<string> {
  const why = `no image repository can be derived from ${new URL(registryUrl).host} and the directory name "${basename(root)}"`;
  if (!process.stdin.isTTY) throw new CliError(`${why}: give --image-repository host[:port]/path`, 2);
  const prompt = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return (await prompt.question(`${why}.\nimage repository (host[:port]/path): `)).trim();
  } finally {
    prompt.close();
  }
}
