/**
 * `platform dev-center secrets|env set|list|unset`: a service's secrets and plain environment
 * variables (docs/services.md). One set of commands for both, apart in what they show: env lists
 * values, secrets never print one, not even in an error (the API's messages are redacted here
 * too). A change applies from the next rollout, since a rollout runs the environment as it was
 * when it started (src/services/record.ts, Release).
 */
import { readFile } from "node:fs/promises";
import type { Command } from "commander";
import { ApiClient } from "../../client/api.ts";
import { CliError } from "../common/errors.ts";
import { printJson, printTable } from "../common/output.ts";
import { servicePath, type VarEntry } from "./api.ts";
import { parseAssignments, parseDotenv, parseKeys, redact } from "./assignments.ts";
import { VAR_HEAD, varRows } from "./format.ts";

type Kind = { command: "secrets" | "env"; noun: string; secret: boolean };

const KINDS: Kind[] = [
  { command: "secrets", noun: "secret", secret: true },
  { command: "env", noun: "variable", secret: false },
];

export function registerVars(devCenter: Command): void {
  for (const kind of KINDS) registerKind(devCenter, kind);
}

const nextStep = (name: string) =>
  `takes effect at the next rollout: platform dev-center rollout start ${name} --restart`;

function registerKind(devCenter: Command, kind: Kind): void {
  const group = devCenter
    .command(kind.command)
    .description(
      kind.secret
        ? "a service's secrets: set, list (names and versions, never values), unset"
        : "a service's environment variables: set, list, unset",
    );

  group
    .command("set <name> [assignments...]")
    .description(`set ${kind.noun}s from KEY=VALUE arguments and/or a dotenv file (applied at the next rollout)`)
    .option("--from-file <file>", "a file of KEY=VALUE lines (# comments); arguments win over it")
    .action(async (name: string, assignments: string[], opts: { fromFile?: string }) => {
      const path = servicePath(name, `/${kind.command}`);
      const values = { ...(opts.fromFile ? await readDotenv(opts.fromFile) : {}), ...parseAssignments(assignments) };
      if (Object.keys(values).length === 0)
        throw new CliError("give KEY=VALUE arguments or --from-file <file>: nothing to set", 2);
      const api = await ApiClient.fromCredentials();
      const answer = await guarded(kind, Object.values(values), () =>
        api.request<{ data: VarEntry[] }>("PUT", path, { values }),
      );
      const versions = new Map(answer.data.map((e) => [e.name, e.version]));
      for (const key of Object.keys(values))
        console.log(`set ${kind.noun} ${key}${versions.has(key) ? ` (version ${versions.get(key)})` : ""}`);
      console.log(nextStep(name));
    });

  group
    .command("list <name>")
    .description(
      kind.secret ? "secret names, versions, when and by whom changed (never values)" : "variables and values",
    )
    .option("--json", "print the API's JSON")
    .action(async (name: string, opts: { json?: boolean }) => {
      const path = servicePath(name, `/${kind.command}`);
      const api = await ApiClient.fromCredentials();
      const answer = await api.request<{ data: VarEntry[] }>("GET", path);
      // A secret's value is dropped even if an API ever sent one.
      if (kind.secret) answer.data = answer.data.map(({ value: _, ...rest }) => rest);
      if (opts.json) return printJson(answer);
      if (answer.data.length === 0) return console.log(`no ${kind.noun}s set for ${name}`);
      const head = kind.secret ? VAR_HEAD : [VAR_HEAD[0] as string, "VALUE", ...VAR_HEAD.slice(1)];
      printTable(head, varRows(answer.data, !kind.secret));
    });

  group
    .command("unset <name> <keys...>")
    .description(`remove ${kind.noun}s (applied at the next rollout)`)
    .action(async (name: string, keys: string[]) => {
      const checked = parseKeys(keys);
      const paths = checked.map((key) => servicePath(name, `/${kind.command}/${encodeURIComponent(key)}`));
      const api = await ApiClient.fromCredentials();
      for (const [i, path] of paths.entries()) {
        await api.request("DELETE", path);
        console.log(`unset ${kind.noun} ${checked[i]}`);
      }
      console.log(nextStep(name));
    });
}

async function readDotenv(file: string): Promise<Record<string, string>> {
  const text = await readFile(file, "utf8").catch((e: NodeJS.ErrnoException) => {
    throw new CliError(`--from-file ${file}: ${e.code === "ENOENT" ? "no such file" : (e.code ?? e.message)}`, 2);
  });
  return parseDotenv(text, file);
}

/** Runs a request whose error, for secrets, must not carry any of the values sent. */
async function guarded<T>(kind: Kind, values: string[], request: () => Promise<T>): Promise<T> {
  try {
    return await request();
  } catch (e) {
    if (!kind.secret || !(e instanceof CliError)) throw e;
    throw new CliError(redact(e.message, values), e.exitCode, { plain: e.plain });
  }
}
