/**
 * `platform registry credentials set|list|remove`: the credentials the platform pulls the
 * organization's service images with (docs/services.md, "Pulling from a private registry"), so a
 * team grants pull access to its own registry without the operator. An admin of the organization
 * sets and removes them; the password comes on stdin only and is never printed back.
 */
import type { Command } from "commander";
import type { z } from "zod";
import { RegistryHost, RegistryPassword, RegistryUsername } from "../registry-credentials/names.ts";
import type { RegistryCredentialInfo } from "../registry-credentials/store.ts";
import { ApiClient } from "../client/api.ts";
import { CliError } from "./common/errors.ts";
import { printJson, printTable } from "./common/output.ts";

const time = (seconds: number) => new Date(seconds * 1000).toISOString().replace(/\.\d+Z$/, "Z");

/** A value checked as the API will check it: bad input exits 2 before anything is sent. */
function checked<T extends z.ZodType>(what: string, schema: T, value: unknown): z.infer<T> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) throw new CliError(`${what}: ${parsed.error.issues[0]?.message ?? "invalid"}`, 2);
  return parsed.data;
}

const path = (host: string) => `/admin/v1/registry-credentials/${encodeURIComponent(host)}`;

/** `readPassword`: `registry login`'s own reading of --password-stdin (image-registry.ts), passed in to keep imports one way. */
export function registerRegistryCredentials(registry: Command, readPassword: () => Promise<string>): void {
  const credentials = registry
    .command("credentials")
    .description("the credentials the platform pulls your organization's service images with");
  credentials
    .command("set <host>")
    .description("store a registry credential (an admin of the organization); the password on stdin")
    .requiredOption("--username <user>", "the registry user")
    .option("--password-stdin", "read the password from stdin (required)")
    .option("--json", "print the stored credential (never its password) as JSON")
    .action(async (hostArg: string, opts: { username: string; passwordStdin?: boolean; json?: boolean }) => {
      const host = checked("host", RegistryHost, hostArg);
      const username = checked("--username", RegistryUsername, opts.username);
      if (!opts.passwordStdin)
        throw new CliError(
          "--username needs --password-stdin: pipe the password in (never on the command line, where `ps` shows it)",
          2,
        );
      const password = checked("--password-stdin", RegistryPassword, await readPassword());
      const api = await ApiClient.fromCredentials();
      const info = await api.request<RegistryCredentialInfo>("PUT", path(host), { username, password });
      if (opts.json) return printJson(info);
      console.log(
        `stored the registry credential for ${info.host} (user ${info.username}): your organization's deploys pull with it`,
      );
    });
  credentials
    .command("list")
    .description("the registries your organization has credentials for (never the passwords)")
    .option("--json", "print JSON")
    .action(async (opts: { json?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const { data } = await api.request<{ data: RegistryCredentialInfo[] }>("GET", "/admin/v1/registry-credentials");
      if (opts.json) return printJson(data);
      if (data.length === 0)
        return console.log(
          "no registry credentials: set one with platform registry credentials set <host> --username <user> --password-stdin",
        );
      printTable(
        ["HOST", "USERNAME", "SET", "BY"],
        data.map((c) => [c.host, c.username, time(c.updated), c.by.name]),
      );
    });
  credentials
    .command("remove <host>")
    .description("remove the organization's registry credential (an admin of the organization)")
    .action(async (hostArg: string) => {
      const host = checked("host", RegistryHost, hostArg);
      const api = await ApiClient.fromCredentials();
      await api.request("DELETE", path(host));
      console.log(`removed the registry credential for ${host}`);
    });
}
