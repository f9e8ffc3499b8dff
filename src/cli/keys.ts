/** `platform keys create|list|revoke` and `platform auth login`. */
import type { Command } from "commander";
import type { ApiKeyRecord } from "../contracts/records.ts";
import { ApiClient } from "./client.ts";
import { CliError, writeCredentials } from "./credentials.ts";
import { printJson, printTable } from "./output.ts";

type PublicKey = Omit<ApiKeyRecord, "hash">;

export function registerKeys(program: Command): void {
  const keys = program.command("keys").description("manage API keys (admin)");
  keys
    .command("create <name>")
    .option("--role <role>", "admin or user", "user")
    .option("--json", "print JSON")
    .action(async (name: string, opts: { role: string; json?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const created = await api.request<PublicKey & { key: string }>("POST", "/admin/v1/keys", { name, role: opts.role });
      if (opts.json) return printJson(created);
      console.log(`created ${created.role} key ${created.id} (${created.name}). It is shown only now:\n${created.key}`);
    });
  keys
    .command("list")
    .option("--json", "print JSON")
    .action(async (opts: { json?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const { data } = await api.request<{ data: PublicKey[] }>("GET", "/admin/v1/keys");
      if (opts.json) return printJson(data);
      printTable(["ID", "NAME", "ROLE", "PREFIX", "CREATED"], data.map((k) => [k.id, k.name, k.role, `${k.prefix}…`, new Date(k.created * 1000).toISOString()]));
    });
  keys
    .command("revoke <id>")
    .action(async (id: string) => {
      const api = await ApiClient.fromCredentials();
      await api.request("DELETE", `/admin/v1/keys/${encodeURIComponent(id)}`);
      console.log(`revoked ${id}`);
    });

  program
    .command("auth")
    .description("authenticate the CLI")
    .command("login")
    .description("store a platform URL and API key in the credentials file (checked against the gateway first)")
    .requiredOption("--base-url <url>", "gateway URL, e.g. http://127.0.0.1:8000")
    .option("--api-key <key>", "API key (default: read from PLATFORM_API_KEY)")
    .action(async (opts: { baseUrl: string; apiKey?: string }) => {
      const apiKey = opts.apiKey ?? process.env.PLATFORM_API_KEY;
      if (!apiKey) throw new CliError("give --api-key <key> or set PLATFORM_API_KEY", 2);
      const creds = { base_url: opts.baseUrl.replace(/\/+$/, ""), api_key: apiKey };
      await new ApiClient(creds).request("GET", "/v1/models");
      console.log(`logged in to ${creds.base_url}; credentials saved to ${await writeCredentials(creds)}`);
    });
}
