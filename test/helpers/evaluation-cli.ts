/**
 * `platform training ...` and `platform inference abtest ...` on their own, for tests that must not
 * depend on how the main CLI is assembled: the same commander setup as src/cli/main.ts.
 */
import { Command, CommanderError } from "commander";
import { registerAbtest } from "../../src/cli/abtest.ts";
import { CliError } from "../../src/cli/common/errors.ts";
import { registerTraining } from "../../src/cli/training.ts";

const program = new Command().name("platform").exitOverride().enablePositionalOptions();
registerTraining(program);
registerAbtest(program.command("inference"));

try {
  await program.parseAsync(process.argv);
} catch (e) {
  if (e instanceof CommanderError) process.exit(e.exitCode === 0 ? 0 : 2);
  console.error(`error: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(e instanceof CliError ? e.exitCode : 1);
}
