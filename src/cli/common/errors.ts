/**
 * The CLI's own error: the one src/process/command-error.ts defines, which the tooling below the
 * CLI throws too, so that `platform` reports both alike. Kept apart so that loading it costs nothing.
 */
export { CommandError as CliError } from "../../process/command-error.ts";
