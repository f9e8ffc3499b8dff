/** `platform usage`: requests, tokens, errors and rate-limit refusals per key, model and version (GET /v1/usage). */
import type { Command } from "commander";
import { NAME_PATTERN, VERSION_PATTERN } from "../contracts/deployment.ts";
import {
  DIMENSIONS_ERROR,
  parseDimensions,
  parseSince,
  SINCE_ERROR,
  USAGE_KEY_ERROR,
  USAGE_KEY_PATTERN,
  type UsageReport,
  type UsageRow,
} from "../usage/query.ts";
import { ApiClient } from "../client/api.ts";
import { CliError } from "./common/errors.ts";
import { printJson, printTable } from "./common/output.ts";

type UsageFlags = { key?: string; model?: string; version?: string; since: string; by: string; json?: boolean };

export function registerUsage(program: Command): void {
  program
    .command("usage")
    .description(
      "usage per key, model and version over a recent span (an admin key sees every key, a user key its own)",
    )
    .option("--key <id>", "only this API key")
    .option("--model <name>", "only this model (the name requests use)")
    .option("--version <v>", "only this version")
    .option(
      "--since <span>",
      "how far back: <n>m, <n>h or <n>d, up to 90d (exact to the minute up to 48h, from the hour beyond)",
      "24h",
    )
    .option("--by <dims>", "group rows by key, model and/or version, comma-separated", "key,model,version")
    .option("--json", "print JSON")
    .action(async (flags: UsageFlags) => {
      const query = usageQuery(flags);
      const api = await ApiClient.fromCredentials();
      const report = await api.request<UsageReport>("GET", `/v1/usage?${query}`);
      if (flags.json) return printJson(report);
      printReport(report);
    });
}

/** The flags as the query string, checked first: bad input exits 2 naming the flag. */
export function usageQuery(flags: UsageFlags): URLSearchParams {
  if (parseSince(flags.since) === undefined) throw new CliError(`--since: ${SINCE_ERROR}, got "${flags.since}"`, 2);
  const by = parseDimensions(flags.by);
  if (!by) throw new CliError(`--by: ${DIMENSIONS_ERROR}, got "${flags.by}"`, 2);
  if (flags.key !== undefined && !USAGE_KEY_PATTERN.test(flags.key))
    throw new CliError(`--key: ${USAGE_KEY_ERROR}, got "${flags.key}"`, 2);
  if (flags.model !== undefined && !NAME_PATTERN.test(flags.model))
    throw new CliError(`--model: expected a model name (letters, digits, ".", "_", "-"), got "${flags.model}"`, 2);
  if (flags.version !== undefined && !VERSION_PATTERN.test(flags.version))
    throw new CliError(`--version: expected a version such as v1, got "${flags.version}"`, 2);
  const q = new URLSearchParams({ since: flags.since, by: by.join(",") });
  if (flags.key !== undefined) q.set("key", flags.key);
  if (flags.model !== undefined) q.set("model", flags.model);
  if (flags.version !== undefined) q.set("version", flags.version);
  return q;
}

const HEADS: Record<string, string> = { key: "KEY", model: "MODEL", version: "VERSION" };

function printReport(report: UsageReport): void {
  const span = `from ${report.from} to ${report.to}`;
  if (report.data.length === 0) {
    console.log(`no usage ${span}`);
    return;
  }
  const cell = (row: UsageRow, dim: string) =>
    dim === "key"
      ? row.key_name
        ? `${row.key} (${row.key_name})`
        : (row.key ?? "")
      : String(row[dim as "model" | "version"] ?? "");
  // Image columns only where images were made (older gateways do not report them).
  const images = report.data.some((r) => (r.images ?? 0) > 0);
  // Cached prompt tokens likewise: only where a replica's KV cache served some.
  const cached = report.data.some((r) => (r.cached_tokens ?? 0) > 0);
  printTable(
    [
      ...report.by.map((d) => HEADS[d] as string),
      "REQUESTS",
      "PROMPT TOKENS",
      ...(cached ? ["CACHED TOKENS"] : []),
      "COMPLETION TOKENS",
      "TOTAL TOKENS",
      "ERRORS",
      "RATE LIMITED",
      ...(images ? ["IMAGES", "STEPS"] : []),
    ],
    report.data.map((r) => [
      ...report.by.map((d) => cell(r, d)),
      r.requests,
      r.prompt_tokens,
      ...(cached ? [r.cached_tokens ?? 0] : []),
      r.completion_tokens,
      r.total_tokens,
      r.errors,
      r.rate_limited,
      ...(images ? [r.images ?? 0, r.steps ?? 0] : []),
    ]),
  );
  console.log(span);
}
