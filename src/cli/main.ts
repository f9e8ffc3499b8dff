/** The `platform` command: one module per command group. */
import { readFileSync } from "node:fs";
import { Command, CommanderError } from "commander";
import { CliError } from "./credentials.ts";
import { registerInference } from "./inference.ts";
import { registerKeys } from "./keys.ts";
import { registerRoles } from "./roles.ts";
import { registerTraining } from "./training.ts";
import { registerUp } from "./up.ts";

const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string };

const program = new Command()
  .name("platform")
  .description("self-hosted model platform: register models, serve them behind an OpenAI-compatible API")
  .version(pkg.version, "-v, --version")
  .enablePositionalOptions()
  .showHelpAfterError()
  .exitOverride();

registerUp(program);
registerTraining(program);
registerInference(program);
registerKeys(program);
registerRoles(program);

try {
  await program.parseAsync(process.argv);
} catch (e) {
  if (e instanceof CommanderError) process.exit(e.exitCode === 0 ? 0 : 2);
  if (e instanceof CliError) {
    console.error(`error: ${e.message}`);
    process.exit(e.exitCode);
  }
  console.error(`error: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
}
