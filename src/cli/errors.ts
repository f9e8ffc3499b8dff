/** The CLI's own error: kept apart from everything else so that loading it costs nothing. */

/** An error the CLI reports as one line, without a stack trace; `exitCode` 2 for bad input, 1 for a failed operation. */
export class CliError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode = 1) {
    super(message);
    this.exitCode = exitCode;
  }
}
