/** The list and "none" argParsers of src/cli/common/flags.ts: values as commander hands them over, refusals as it prints them. */
import { Command, CommanderError } from "commander";
import { describe, expect, it } from "vitest";
import { orNone, wholeNumber, wholeNumberList } from "../../src/cli/common/flags.ts";

/** Parses `args` for one option, resolving its value or what commander wrote on stderr. */
async function parse(flags: string, parser: (text: string) => unknown, args: string[]) {
  let written = "";
  let value: unknown;
  const program = new Command()
    .exitOverride()
    .configureOutput({ writeErr: (text) => (written += text), writeOut: () => undefined })
    .option(flags, "", parser)
    .action((opts: Record<string, unknown>) => {
      value = Object.values(opts)[0];
    });
  const error = await program.parseAsync(args, { from: "user" }).then(
    () => undefined,
    (e: unknown) => e,
  );
  if (error !== undefined) {
    expect(error).toBeInstanceOf(CommanderError);
    return { error: written };
  }
  return { value };
}

describe("wholeNumberList", () => {
  it("takes comma-separated whole numbers in range, each once", async () => {
    const levels = wholeNumberList(1, 1024);
    expect(await parse("--concurrency <list>", levels, ["--concurrency", "1,4,16,4"])).toEqual({ value: [1, 4, 16] });
    for (const bad of ["1,x", "0", "1,,2", "1025", "1.5"])
      expect(await parse("--concurrency <list>", levels, ["--concurrency", bad])).toEqual({
        error: `error: option '--concurrency <list>' argument '${bad}' is invalid. expected comma-separated whole numbers from 1 to 1024\n`,
      });
  });
});

describe("orNone", () => {
  it('passes "none" on as itself (commander would store a null as ""), and anything else to the parser', async () => {
    const limit = orNone(wholeNumber(1, 10));
    expect(await parse("--rpm <n|none>", limit, ["--rpm", "none"])).toEqual({ value: "none" });
    expect(await parse("--rpm <n|none>", limit, ["--rpm", "7"])).toEqual({ value: 7 });
    expect(await parse("--rpm <n|none>", limit, ["--rpm", "0"])).toEqual({
      error: "error: option '--rpm <n|none>' argument '0' is invalid. expected a whole number from 1 to 10 or none\n",
    });
  });
});
