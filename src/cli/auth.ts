/**
 * `platform auth login|status|logout` and `platform auth tokens list|revoke` (docs/signin.md): who
 * the CLI is for each registry, and the CLI sessions behind it.
 */
import { type Command, Option } from "commander";
import { TokenId, type TokenRecord } from "../tokens/record.ts";
import { type CliSettings, loadCliSettings } from "../settings/cli.ts";
import { ApiClient } from "../client/api.ts";
import {
  type CredentialsFile,
  normalizeBaseUrl,
  readCredentials,
  resolveRegistry,
  updateCredentials,
  writeCredentials,
} from "../client/credentials.ts";
import { CliError } from "./common/errors.ts";
import { orgFlag } from "./orgs.ts";
import { printJson, printTable } from "./common/output.ts";
import { openBrowser, signInWithBrowser, signInWithDevice } from "../signin/client.ts";

/** `GET /admin/v1/whoami` (src/gateway/routes/tokens.ts). */
type Whoami = {
  kind: "key" | "token";
  id: string;
  name: string;
  org: string;
  role: string;
  operator: boolean;
  token?: { id: string; expires: number };
};

type RegistryFlags = { registryUrl?: string; baseUrl?: string };

/** `--registry-url` (and its old name `--base-url`) on every auth command. */
function registryOptions(command: Command): Command {
  return command
    .option(
      "--registry-url <url>",
      "the registry (gateway) URL, e.g. http://127.0.0.1:8000 (default: the workspace's registryUrl, PLATFORM_BASE_URL, the current default)",
    )
    .addOption(new Option("--base-url <url>", "the old name of --registry-url").hideHelp());
}

function registryFlag(opts: RegistryFlags): string | undefined {
  const url = opts.registryUrl ?? opts.baseUrl;
  if (url !== undefined && !(URL.canParse(url) && /^https?:$/.test(new URL(url).protocol)))
    throw new CliError(`--registry-url: expected an http(s) URL, got "${url}"`, 2);
  return url;
}

/** The registry a command is about; the credentials file's state need not be valid (signing in mends it). */
async function registryOf(cli: CliSettings, opts: RegistryFlags): Promise<{ url: string; file: CredentialsFile }> {
  const explicit = registryFlag(opts);
  const file = await readCredentials(cli).catch(() => ({ registries: {} }) as CredentialsFile);
  const url = await resolveRegistry(cli, file, explicit);
  if (!url) throw new CliError("give --registry-url <url> (or set PLATFORM_BASE_URL, or run platform init)", 2);
  return { url, file };
}

const when = (ms: number) => new Date(ms).toISOString();

export function registerAuth(program: Command): void {
  const auth = program.command("auth").description("sign the CLI in and out of registries, and manage its sessions");

  registryOptions(
    auth
      .command("login")
      .description(
        "sign in to a registry in a browser (or with a device code, or an API key) and keep the credentials for it, the default from then on",
      ),
  )
    .option("--api-key <key>", "store this API key instead of signing in (default: PLATFORM_API_KEY when set)")
    .option("--no-browser", "sign in with a code entered in a browser elsewhere (a machine without one)")
    .action(async (opts: RegistryFlags & { apiKey?: string; browser: boolean }) => {
      const cli = loadCliSettings();
      const { url } = await registryOf(cli, opts);
      const apiKey = opts.apiKey ?? cli.apiKey;
      if (apiKey) {
        const creds = { base_url: normalizeBaseUrl(url), api_key: apiKey };
        const me = await new ApiClient(creds, cli).request<Whoami>("GET", "/admin/v1/whoami");
        const path = await writeCredentials(creds, cli);
        return console.log(
          `logged in to ${creds.base_url} as ${me.name} (${me.role} of organization ${me.org}); credentials saved to ${path}`,
        );
      }
      const signedIn = opts.browser
        ? await signInWithBrowser(url, (link) => {
            console.error(`Opening the sign-in page in your browser. If nothing opens, visit:\n\n  ${link}\n`);
            openBrowser(link, cli.browser);
          })
        : await signInWithDevice(url, (text) => console.error(text));
      await updateCredentials((file) => {
        file.registries[url] = {
          token: signedIn.access_token,
          refresh_token: signedIn.refresh_token,
          expires: when(signedIn.expires),
        };
        file.default = url;
      }, cli);
      console.log(
        `logged in to ${url} as ${signedIn.name} (${signedIn.role} of organization ${signedIn.org}); token ${signedIn.id} expires ${when(signedIn.expires)}, credentials saved to ${cli.credentialsFile}`,
      );
    });

  registryOptions(auth.command("status").description("who you are on a registry: name, organization, role, expiry"))
    .option("--json", "print JSON")
    .action(async (opts: RegistryFlags & { json?: boolean }) => {
      const api = await ApiClient.fromCredentials(registryFlag(opts));
      const me = await api.request<Whoami>("GET", "/admin/v1/whoami");
      const credential = me.kind === "token" ? "token" : "api_key";
      if (opts.json) return printJson({ registry: api.baseUrl, credential, ...me });
      const lines = [
        ["registry", api.baseUrl],
        ["signed in as", `${me.name} (${me.id})`],
        ["organization", me.org],
        ["role", `${me.role}${me.operator ? " (operator)" : ""}`],
        [
          "credential",
          me.token
            ? `CLI token ${me.token.id}, expires ${when(me.token.expires)} (renewed by the CLI until its session ends)`
            : "API key (does not expire)",
        ],
      ];
      for (const [k, v] of lines) console.log(`${(k as string).padEnd(13)} ${v}`);
    });

  registryOptions(
    auth
      .command("logout")
      .description(
        "revoke the CLI token on the registry and delete its credentials here (an API key is only deleted here)",
      ),
  ).action(async (opts: RegistryFlags) => {
    const cli = loadCliSettings();
    const { url, file } = await registryOf(cli, opts);
    const entry = file.registries[url];
    if (!entry) throw new CliError(`not logged in to ${url}: ${cli.credentialsFile} has no entry for it`);
    let outcome = "";
    let failure: string | undefined;
    if (entry.token) {
      try {
        const api = new ApiClient({ base_url: url, ...entry }, cli);
        const me = await api.request<Whoami>("GET", "/admin/v1/whoami");
        if (me.token) await api.request("DELETE", `/admin/v1/tokens/${encodeURIComponent(me.token.id)}`);
        outcome = `; token ${me.token?.id} revoked`;
      } catch (e) {
        if (!(e instanceof CliError)) throw e;
        // A session already over needs no revoking; anything else leaves the token alive on the server.
        if (e.plain && e.message.startsWith("session expired")) outcome = "; its session had already ended";
        else failure = e.message;
      }
    } else outcome = "; the API key itself stays valid (platform keys revoke <id> revokes it)";
    await updateCredentials((f) => {
      delete f.registries[url];
      if (f.default === url) delete f.default;
    }, cli);
    if (failure)
      throw new CliError(
        `deleted the credentials for ${url} here, but could not revoke the token there: ${failure}. It stays valid until it expires unless revoked (platform auth tokens revoke <id>, or the dashboard).`,
      );
    console.log(`logged out of ${url}${outcome}`);
  });

  const tokens = auth
    .command("tokens")
    .description("CLI sessions: yours; an organization admin's, its organization's; an operator's, all");
  registryOptions(tokens.command("list").description("the CLI sessions you may see"))
    .option("--org <id>", "only this organization's (operators)")
    .option("--json", "print JSON")
    .action(async (opts: RegistryFlags & { org?: string; json?: boolean }) => {
      const org = orgFlag(opts.org);
      const api = await ApiClient.fromCredentials(registryFlag(opts));
      const { data } = await api.request<{ data: TokenRecord[] }>(
        "GET",
        `/admin/v1/tokens${org ? `?org=${encodeURIComponent(org)}` : ""}`,
      );
      if (opts.json) return printJson(data);
      printTable(
        ["ID", "NAME", "SUBJECT", "ORG", "ROLE", "CREATED", "EXPIRES", "SESSION ENDS"],
        data.map((t) => [
          t.id,
          t.name,
          `${t.subject.kind} ${t.subject.id}`,
          t.org,
          t.role,
          when(t.created),
          when(t.expires),
          when(t.refresh_expires),
        ]),
      );
    });
  registryOptions(tokens.command("revoke <id>").description("end a CLI session: its tokens stop working within 5 s"))
    .option("--json", "print JSON")
    .action(async (id: string, opts: RegistryFlags & { json?: boolean }) => {
      const parsed = TokenId.safeParse(id);
      if (!parsed.success) throw new CliError(`<id> "${id}": ${parsed.error.issues[0]?.message}`, 2);
      const api = await ApiClient.fromCredentials(registryFlag(opts));
      const { revoked } = await api.request<{ revoked: TokenRecord }>(
        "DELETE",
        `/admin/v1/tokens/${encodeURIComponent(parsed.data)}`,
      );
      if (opts.json) return printJson(revoked);
      console.log(`revoked ${revoked.id} (${revoked.name}, organization ${revoked.org})`);
    });
}
