/** `platform orgs create|list`: organizations (an operator creates them; anyone sees its own). */
import type { Command } from "commander";
import { ORG_ID_ERROR, ORG_ID_PATTERN } from "../contracts/orgs.ts";
import type { Org } from "../orgs/record.ts";
import { ApiClient } from "../client/api.ts";
import { CliError } from "./common/errors.ts";
import { printJson, printTable } from "./common/output.ts";

export function registerOrgs(program: Command): void {
  const orgs = program.command("orgs").description("organizations: the boundary around keys, tokens, jobs and files");
  orgs
    .command("create <id>")
    .description("create an organization (operators); then `platform keys create <name> --org <id> --role admin`")
    .option("--name <name>", "a display name (default: the id)")
    .option("--json", "print JSON")
    .action(async (id: string, opts: { name?: string; json?: boolean }) => {
      if (!ORG_ID_PATTERN.test(id)) throw new CliError(`<id> "${id}": ${ORG_ID_ERROR}`, 2);
      if (opts.name !== undefined && (opts.name.length === 0 || opts.name.length > 100))
        throw new CliError("--name: expected 1 to 100 characters", 2);
      const api = await ApiClient.fromCredentials();
      const created = await api.request<Org>("POST", "/admin/v1/orgs", {
        id,
        ...(opts.name !== undefined ? { name: opts.name } : {}),
      });
      if (opts.json) return printJson(created);
      console.log(
        `created organization ${created.id} (${created.name}); give it an admin with \`platform keys create <name> --org ${created.id} --role admin\``,
      );
    });
  orgs
    .command("list")
    .description("every organization (an operator), or your own")
    .option("--json", "print JSON")
    .action(async (opts: { json?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const { data } = await api.request<{ data: Org[] }>("GET", "/admin/v1/orgs");
      if (opts.json) return printJson(data);
      printTable(
        ["ID", "NAME", "CREATED"],
        data.map((o) => [o.id, o.name, o.created === 0 ? "-" : new Date(o.created * 1000).toISOString()]),
      );
    });
}

/** `--org`, checked here so a bad id exits 2 before anything is sent. */
export function orgFlag(org: string | undefined): string | undefined {
  if (org !== undefined && !ORG_ID_PATTERN.test(org)) throw new CliError(`--org: ${ORG_ID_ERROR}, got "${org}"`, 2);
  return org;
}
