/**
 * The error a command reports as one line, without a stack trace. The client-side tooling under
 * src/ (workspace, protos, images, scaffold, publish) throws it so that `platform` prints it as
 * it is and exits with its code; src/cli/common/errors.ts names it CliError.
 */

/**
 * `exitCode` 2 for bad input, 1 for a failed operation. `plain`: printed as it is, without the
 * `error:` prefix (a line the user acts on word for word, such as `session expired for
 * <registry>: run platform auth login`).
 */
export class CommandError extends Error {
  readonly exitCode: number;
  readonly plain: boolean;
  constructor(message: string, exitCode = 1, options: { plain?: boolean } = {}) {
    super(message);
    this.exitCode = exitCode;
    this.plain = options.plain ?? false;
  }
}
