/**
 * `platform service create <name> --lang node|python [--example] [--service <pkg.Service>] [--force]`:
 * scaffolds, at the workspace root, a service implementing one of the workspace's proto services
 * (docs/scaffolds.md). The service is found in the protos (src/scaffold/discover.ts), each language
 * writes its files from the same input (src/scaffold/types.ts), nothing is replaced without --force,
 * and the stubs are generated for the language, so the scaffold builds and tests at once.
 */
import type { Command } from "commander";
import { z } from "zod";
import { CliError } from "./common/errors.ts";
import { GENERATED_DIR, generate } from "../protos/generate.ts";
import { type Language, LANGUAGES } from "../protos/languages.ts";
import { discoverService } from "../scaffold/discover.ts";
import { scaffoldNode } from "../scaffold/node.ts";
import { scaffoldPython } from "../scaffold/python/index.ts";
import type { Scaffolder } from "../scaffold/types.ts";
import { writeScaffold } from "../scaffold/write.ts";
import { requireWorkspace } from "../workspace/find.ts";
import { protoWorkspace } from "../workspace/protos.ts";

export const SCAFFOLDERS: Record<Language, Scaffolder> = { node: scaffoldNode, python: scaffoldPython };

/** What to do after the scaffold is written, per language. */
const NEXT_STEPS: Record<Language, string[]> = {
  node: [
    "npm ci && npm test             # installs package-lock.json's versions; the tests call every RPC",
    "git add -A && git commit -m 'scaffold the service'",
    "platform registry login && platform publish",
  ],
  python: [
    "see README.md: create .venv (pip, with your mirrors), `platform proto generate --lang python`, pytest",
    "git add -A && git commit -m 'scaffold the service'",
    "platform registry login && platform publish",
  ],
};

/**
 * A scaffolded service's name: an npm package, a Python distribution, an image and a deployed
 * service's name at once, so no longer than a service name may be (src/services/names.ts).
 */
const ScaffoldName = z
  .string()
  .regex(/^[a-z][a-z0-9-]*$/, {
    message: "expected lowercase letters, digits and '-', starting with a letter, such as items or order-history",
  })
  .max(40, { message: "expected at most 40 characters (what a deployed service's name may be)" })
  .refine((n) => !n.endsWith("-") && !n.includes("--"), { message: "expected no '-' at the end and no '--'" });

type Options = { lang?: string; example?: boolean; service?: string; force?: boolean };

export function registerService(program: Command): void {
  const service = program.command("service").description("services that implement the workspace's proto contracts");

  service
    .command("create <name>")
    .description("scaffold a service for one of the workspace's proto services, at the workspace root")
    .option("--lang <lang>", `${LANGUAGES.join(" or ")} (default: the workspace's language)`)
    .option("--example", "the example ItemService (CreateItem, GetItem, ListItems) instead of empty handlers")
    .option("--service <pkg.Service>", "the proto service to implement, where the name does not decide it")
    .option("--force", "replace files that already exist")
    .action(async (name: string, opts: Options) => {
      const parsed = ScaffoldName.safeParse(name);
      if (!parsed.success) throw new CliError(`<name> "${name}": ${parsed.error.issues[0]?.message}`, 2);
      const lang = LANGUAGES.find((l) => l === opts.lang);
      if (opts.lang !== undefined && !lang)
        throw new CliError(`--lang: expected ${LANGUAGES.join(" or ")}, got "${opts.lang}"`, 2);
      const workspace = await requireWorkspace();
      const ws = await protoWorkspace(workspace);
      const language = lang ?? workspace.settings.language;
      const found = await discoverService(ws, name, opts.service);
      const files = await SCAFFOLDERS[language]({
        name,
        example: opts.example ?? false,
        service: found.service,
        package: found.package,
        messages: found.messages,
        protoRoot: ws.protoRoot,
        protoFiles: found.protoFiles,
        imageRepository: workspace.settings.imageRepository,
        registryUrl: workspace.settings.registryUrl,
      });
      const result = await writeScaffold(ws.root, files, opts.force ?? false);
      const replaced = new Set(result.replaced);
      for (const path of result.written) console.log(`${replaced.has(path) ? "replaced" : "wrote   "} ${path}`);
      let stubs: Awaited<ReturnType<typeof generate>> | undefined;
      try {
        stubs = await generate(ws, language);
      } catch (e) {
        if (!(e instanceof CliError)) throw e;
        const retry = `then run \`platform proto generate --lang ${language}\``;
        // A Python team often has no virtual environment with grpcio-tools yet: the scaffold's README
        // makes one. Node's generator comes with the CLI, so a failure there is a real one.
        if (language !== "python")
          throw new CliError(
            `the scaffold is written, but generating the stubs failed: ${e.message}\nfix that, ${retry}`,
          );
        console.error(`note: the stubs are not generated yet: ${e.message}\nset up .venv as README.md says, ${retry}`);
      }
      for (const path of stubs?.written ?? []) console.log(`wrote    ${GENERATED_DIR}/${path}`);
      const generated = stubs ? `stubs in ${GENERATED_DIR}/ (${stubs.generator})` : "stubs not generated yet";
      console.log(
        `\n${found.service.full_name} scaffolded in ${language}${opts.example ? " (example)" : ""}: ${result.written.length} files, ${generated}`,
      );
      console.log(`next:\n${NEXT_STEPS[language].map((s) => `  ${s}`).join("\n")}`);
    });
}
