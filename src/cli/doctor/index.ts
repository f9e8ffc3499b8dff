/**
 * `platform doctor [--json]`: runs every check of checks.ts at once, prints each in order with ✓, !,
 * ✗ or - and, under a failure or a warning, its fix; exits 1 when a required check fails.
 */
import type { Command } from "commander";
import { loadCliSettings } from "../../settings/cli.ts";
import { loadToolSettings } from "../../settings/tools.ts";
import { printJson } from "../common/output.ts";
import { type CheckResult, type CheckStatus, type DoctorCheck, type DoctorContext, fail } from "./check.ts";
import { DOCTOR_CHECKS } from "./checks.ts";
import { doctorContext } from "./context.ts";

/** A check still running after this fails, so an unreachable host cannot hold doctor up. */
const CHECK_TIMEOUT_MS = 20_000;

export type CheckOutcome = CheckResult & { id: string; name: string; required: boolean };

const MARKS: Record<CheckStatus, string> = { ok: "✓", warn: "!", fail: "✗", skip: "-" };

export function registerDoctor(program: Command): void {
  program
    .command("doctor")
    .description("check this machine and workspace: CLI, .platformrc.json, platform, credentials, tools, cluster")
    .option("--json", "print the checks as JSON")
    .action(async (opts: { json?: boolean }) => {
      const outcomes = await runChecks(DOCTOR_CHECKS, doctorContext(loadCliSettings(), loadToolSettings()));
      const failed = outcomes.filter((o) => o.status === "fail");
      if (opts.json) printJson({ ok: failed.length === 0, checks: outcomes });
      else print(outcomes);
      // Exits here rather than when the event loop drains: a check given up on may hold a socket open.
      process.exit(failed.length > 0 ? 1 : 0);
    });
}

/** Every check at once (they share what they look up through `ctx`), each with its outcome; a non-required failure is a warning. */
export async function runChecks(checks: readonly DoctorCheck[], ctx: DoctorContext): Promise<CheckOutcome[]> {
  return Promise.all(
    checks.map(async (check) => {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<CheckResult>((resolve) => {
        timer = setTimeout(() => resolve(fail(`no answer within ${CHECK_TIMEOUT_MS / 1000} s`)), CHECK_TIMEOUT_MS);
      });
      const result = await Promise.race([check.run(ctx), timeout])
        .catch((e: unknown) => fail(e instanceof Error ? e.message : String(e)))
        .finally(() => clearTimeout(timer));
      const status = result.status === "fail" && !check.required ? "warn" : result.status;
      return { id: check.id, name: check.name, required: check.required, ...result, status };
    }),
  );
}

function print(outcomes: CheckOutcome[]): void {
  const width = Math.max(...outcomes.map((o) => o.name.length));
  for (const o of outcomes) {
    console.log(`${MARKS[o.status]} ${o.name.padEnd(width)}  ${o.summary}`);
    if (o.fix && (o.status === "fail" || o.status === "warn")) console.log(`  ${" ".repeat(width)}  fix: ${o.fix}`);
  }
  const count = (status: CheckStatus) => outcomes.filter((o) => o.status === status).length;
  const [failed, warnings] = [count("fail"), count("warn")];
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;
  console.log(
    failed > 0
      ? `\n${plural(failed, "required check")} failed${warnings ? `, ${plural(warnings, "warning")}` : ""}`
      : `\nall required checks passed${warnings ? ` (${plural(warnings, "warning")})` : ""}`,
  );
}
