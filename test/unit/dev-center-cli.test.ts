/**
 * The dev-center CLI's pure parts (src/cli/dev-center/): KEY=VALUE arguments and dotenv files
 * (errors name the key or the line, never the value), the number and duration flags, and the rows
 * and lines people read (tables, `--watch`'s change lines, short digests, durations).
 */
import { Command, CommanderError } from "commander";
import { describe, expect, it } from "vitest";
import { parseAssignments, parseDotenv, parseKeys, redact } from "../../src/cli/dev-center/assignments.ts";
import { sinceFlag } from "../../src/cli/dev-center/flags.ts";
import { registerDevCenter } from "../../src/cli/dev-center/index.ts";
import {
  elapsed,
  historyRows,
  overviewHead,
  replicaCounts,
  replicaRows,
  serviceRows,
  shortDigest,
  statusHeadline,
  varRows,
  watchLines,
} from "../../src/cli/dev-center/format.ts";
import { formatLogLine } from "../../src/cli/dev-center/logs.ts";
import { CliError } from "../../src/cli/common/errors.ts";
import { digestOf, OWNER, rollout, serviceRecord, statusReplica, T0 } from "../helpers/service-records.ts";

/** The CliError `fn` throws (failing the test when it throws none or another). */
function errorOf(fn: () => unknown): CliError {
  try {
    fn();
  } catch (e) {
    if (e instanceof CliError) return e;
    throw e;
  }
  throw new Error("expected a CliError");
}

describe("KEY=VALUE arguments", () => {
  it("splits at the first '=', keeps empty values, and a later key wins", () => {
    expect(parseAssignments(["A=1", "B=x=y", "C=", "A=2"])).toEqual({ A: "2", B: "x=y", C: "" });
  });

  it("names the argument and the key of a bad one, never its value (exit 2)", () => {
    const bad = errorOf(() => parseAssignments(["OK=1", "9LIVES=hunter2"]));
    expect(bad.exitCode).toBe(2);
    expect(bad.message).toMatch(/argument 2: "9LIVES": expected a variable name/);
    expect(bad.message).not.toContain("hunter2");
    const bare = errorOf(() => parseAssignments(["hunter2"]));
    expect(bare.message).toMatch(/argument 1: expected KEY=VALUE/);
    expect(bare.message).not.toContain("hunter2");
    expect(errorOf(() => parseAssignments(["PORT=1"])).message).toMatch(/"PORT": is set by the platform itself/);
  });

  it("checks values (NUL, size) naming only the key", () => {
    const nul = errorOf(() => parseAssignments(["TOKEN=ab\0cd"]));
    expect(nul.message).toMatch(/the value of TOKEN contains a NUL byte/);
    const big = errorOf(() => parseAssignments([`BIG=${"x".repeat(33 * 1024)}`]));
    expect(big.message).toMatch(/the value of BIG expected at most 32768 bytes/);
    expect(big.message.length).toBeLessThan(200);
  });

  it("checks bare keys for unset", () => {
    expect(parseKeys(["A", "B_2"])).toEqual(["A", "B_2"]);
    expect(errorOf(() => parseKeys(["A", "B-2"])).message).toMatch(/KEY 2: "B-2"/);
  });
});

describe("dotenv files", () => {
  it("reads KEY=VALUE lines, comments, blanks, export, quotes", () => {
    const text = [
      "# database",
      "DATABASE_URL=postgres://u:p@db/x # the primary",
      "",
      "  export TOKEN = abc#def  ",
      'QUOTED="a b\\n\\"c\\""',
      "SINGLE='$not \\n expanded' # note",
      "EMPTY=",
      "",
    ].join("\r\n");
    expect(parseDotenv(text, ".env")).toEqual({
      DATABASE_URL: "postgres://u:p@db/x",
      TOKEN: "abc#def",
      QUOTED: 'a b\n"c"',
      SINGLE: "$not \\n expanded",
      EMPTY: "",
    });
  });

  it("names the file and line of a bad line, not its value", () => {
    const e = errorOf(() => parseDotenv("A=1\n# c\njust-a-secret-value\n", "prod.env"));
    expect(e.message).toBe("prod.env:3: expected KEY=VALUE");
    expect(e.exitCode).toBe(2);
    expect(errorOf(() => parseDotenv("A=1\n1BAD=s3cret", "f")).message).toMatch(/^f:2: "1BAD": expected a variable/);
    const open = errorOf(() => parseDotenv('A="s3cret', "f"));
    expect(open.message).toBe('f:1: expected a closing " at the end of the value');
  });
});

describe("redact", () => {
  it("replaces every value sent, longest first, leaving short ones", () => {
    expect(redact("bad value hunter2 (hunter22) x", ["hunter2", "hunter22", "x"])).toBe("bad value *** (***) x");
  });
});

describe("flags", () => {
  /** The message commander refuses `args` with (after `platform dev-center`), before any action runs. */
  async function refusal(...args: string[]): Promise<string> {
    const program = new Command().exitOverride().configureOutput({ writeErr: () => {}, writeOut: () => {} });
    registerDevCenter(program);
    const e = await program.parseAsync(["dev-center", ...args], { from: "user" }).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(CommanderError);
    expect((e as CommanderError).code).toBe("commander.invalidArgument");
    return (e as CommanderError).message;
  }

  it("--replicas, --port, --tail, <replicas>: whole numbers in range, refused before anything runs", async () => {
    for (const bad of ["0", "21", "1.5", "two", "-1"])
      expect(await refusal("service", "deploy", "items", "--tag", "1.0.0", "--replicas", bad)).toContain(
        `option '--replicas <n>' argument '${bad}' is invalid. expected a whole number from 1 to 20`,
      );
    expect(await refusal("service", "deploy", "items", "--tag", "1.0.0", "--port", "70000")).toContain(
      "expected a whole number from 1 to 65535",
    );
    expect(await refusal("service", "scale", "items", "21")).toContain("expected a whole number from 1 to 20");
    expect(await refusal("logs", "items", "--tail", "x")).toContain("expected a whole number from 0 to 100000");
  });

  it("--since: the platform's durations and hours, sent in the platform's form", async () => {
    expect(sinceFlag("10m")).toBe("10m");
    expect(sinceFlag("90s")).toBe("90s");
    expect(sinceFlag("120s")).toBe("2m");
    expect(sinceFlag("2h")).toBe("120m");
    expect(sinceFlag("1.5h")).toBe("90m");
    for (const bad of ["10", "0s", "1d", "m", "-5m"])
      expect(await refusal("logs", "items", "--since", bad)).toContain(
        `option '--since <duration>' argument '${bad}' is invalid. expected "<n>s" (also <n>ms, <n>m, <n>h)`,
      );
  });
});

describe("rendering", () => {
  const done = rollout(2, "1.1.0-bbb", {
    from_tag: "1.0.0-aaa",
    phase: "complete",
    started: T0,
    finished: T0 + 65_000,
  });
  const running = rollout(3, "1.2.0-ccc", { from_tag: "1.1.0-bbb", started: T0 });

  it("short digests and durations", () => {
    expect(shortDigest(digestOf("x"))).toMatch(/^sha256:[0-9a-f]{12}$/);
    expect([elapsed(400), elapsed(12_000), elapsed(65_000), elapsed(7_380_000)]).toEqual([
      "0.4s",
      "12s",
      "1m 05s",
      "2h 03m",
    ]);
  });

  it("service rows: tag (and where a rollout goes), ready/desired from either replicas form, phase, url", () => {
    const serving = { ...serviceRecord("items", running, { current: done.release }), url: "http://gw/rpc" };
    const withList = {
      ...serving,
      replicas: [statusReplica("a", "1.1.0-bbb", "ready"), statusReplica("b", "1.2.0-ccc", "starting")],
      desired_replicas: 3,
    };
    expect(serviceRows([serving, withList])).toEqual([
      ["items", "1.1.0-bbb → 1.2.0-ccc", "0/2", "progressing", "http://gw/rpc"],
      ["items", "1.1.0-bbb → 1.2.0-ccc", "1/3", "progressing", "http://gw/rpc"],
    ]);
    expect(replicaCounts({ ...withList, desired_replicas: undefined })).toEqual({ ready: 1, desired: 2 });
    const fresh = serviceRecord("new", rollout(1, "0.1.0-a"));
    expect(serviceRows([fresh])[0]?.slice(0, 2)).toEqual(["new", "- → 0.1.0-a"]);
  });

  it("history rows: id, tag, cause, phase, started, duration (so far while progressing), by", () => {
    expect(historyRows([running, done], T0 + 5_000)).toEqual([
      ["3", "1.2.0-ccc", "start", "progressing", "2026-01-02T03:04:05Z", "5s so far", "ana"],
      ["2", "1.1.0-bbb", "start", "complete", "2026-01-02T03:04:05Z", "1m 05s", "ana"],
    ]);
  });

  it("status: a headline, replica rows and --watch's lines", () => {
    const replicas = [
      statusReplica("items-r3-a", "1.2.0-ccc", "starting"),
      statusReplica("items-r2-a", "1.1.0-bbb", "ready", 2),
    ];
    const status = { phase: "progressing" as const, rollout: running, current: done.release, replicas };
    expect(statusHeadline(status)).toBe(
      "rollout 3 (1.1.0-bbb → 1.2.0-ccc): progressing; replicas: 1 starting, 1 ready",
    );
    expect(replicaRows(replicas)[1]).toEqual([
      "items-r2-a",
      "1.1.0-bbb",
      shortDigest(digestOf("1.1.0-bbb")),
      "ready",
      "2",
      "-",
    ]);
    const lines = watchLines(status);
    expect(lines).toHaveLength(3);
    expect(lines[1]).toBe(`  items-r3-a 1.2.0-ccc ${shortDigest(digestOf("1.2.0-ccc"))} starting, restarts 0`);
    const restart = rollout(4, "1.2.0-ccc", { cause: "restart" });
    expect(statusHeadline({ ...status, rollout: restart, replicas: [] })).toBe(
      "rollout 4 (restart at 1.2.0-ccc): progressing; replicas: none",
    );
  });

  it("variables show values, secrets never do", () => {
    const entries = [{ name: "A", value: "v", version: 2, updated: T0, by: OWNER }];
    expect(varRows(entries, true)).toEqual([["A", "v", "2", "2026-01-02T03:04:05Z", "ana"]]);
    expect(varRows(entries, false)).toEqual([["A", "2", "2026-01-02T03:04:05Z", "ana"]]);
  });

  it("log lines and the overview's head", () => {
    expect(formatLogLine({ at: T0, replica: "items-r1-a", tag: "1.0.0", text: "listening\n" })).toBe(
      "[items-r1-a 1.0.0] listening",
    );
    expect(overviewHead("# Items\n\nStores items.\n\n- a\n- b\n- c\n- d", 3)).toEqual([
      "# Items",
      "Stores items.",
      "- a",
    ]);
  });
});
