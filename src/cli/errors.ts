/** The CLI's own error: kept apart from everything else so that loading it costs nothing. */

/**
 * An error the CLI reports as one line, without a stack trace; `exitCode` 2 for bad input, 1 for a
 * failed operation. `plain`: printed as it is, without the `error:` prefix (a line the user acts on
 * word for word, such as `session expired for <registry>: run platform auth login`).
 */
export class CliError extends Error {
  readonly exitCode: number;
  readonly plain: boolean;
  constructor(message: string, exitCode = 1, options: { plain?: boolean } = {}) {
    super(message);
    this.exitCode = exitCode;
    this.plain = options.plain ?? false;
  }
}
