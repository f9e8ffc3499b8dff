/** `platform keys create|list|revoke|bootstrap` and `platform auth login`. */
import { readFile } from "node:fs/promises";
import type { Command } from "commander";
import type { ApiKeyRecord } from "../contracts/records.ts";
import { bootstrapAdminKey, type BootstrapOutcome, generateApiKey, weakKeyReason } from "../control/apikeys.ts";
import { type Control, connectControl, maskRedisUrl } from "../control/redis.ts";
import { PlatformError } from "../errors.ts";
import { loadCliSettings } from "../settings/cli.ts";
import { loadSettings } from "../settings/index.ts";
import { ApiClient } from "./client.ts";
import { CliError } from "./errors.ts";
import { writeCredentials } from "./credentials.ts";
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
    .command("bootstrap")
    .description("register the first admin key from PLATFORM_BOOTSTRAP_ADMIN_KEY or --from-file, straight into Redis (REDIS_URL); idempotent")
    .option("--from-file <path>", "read the key from this file (a mounted Secret) instead of PLATFORM_BOOTSTRAP_ADMIN_KEY")
    .option("--generate", "print a fresh strong key to put in the Secret, and store nothing")
    .option("--json", "print JSON")
    .action(async (opts: { fromFile?: string; generate?: boolean; json?: boolean }) => {
      if (opts.generate) {
        if (opts.fromFile) throw new CliError("--generate and --from-file do not go together: generate a key, store it in the Secret, then bootstrap from it", 2);
        return console.log(opts.json ? JSON.stringify({ key: generateApiKey() }) : generateApiKey());
      }
      const settings = loadSettings();
      const key = opts.fromFile ? await readKeyFile(opts.fromFile) : settings.bootstrapAdminKey;
      if (!key) throw new CliError("no key: set PLATFORM_BOOTSTRAP_ADMIN_KEY or give --from-file <path> (`platform keys bootstrap --generate` makes one)", 2);
      const weak = weakKeyReason(key);
      if (weak) throw new CliError(`the bootstrap admin key is too weak: ${weak}`, 2);
      if (!settings.redisUrl) throw new CliError("REDIS_URL is not set; `keys bootstrap` writes to the platform's Redis directly, since no admin key exists yet", 2);
      const ctl = connectControl(settings.redisUrl, settings.prefix);
      try {
        const done = await runBootstrap(ctl, key, maskRedisUrl(settings.redisUrl));
        if (opts.json) return printJson({ outcome: done.outcome, id: done.record.id, name: done.record.name, role: done.record.role });
        console.log(describeBootstrap(done));
      } finally {
        ctl.redis.disconnect();
      }
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
      const cli = loadCliSettings();
      const apiKey = opts.apiKey ?? cli.apiKey;
      if (!apiKey) throw new CliError("give --api-key <key> or set PLATFORM_API_KEY", 2);
      const creds = { base_url: opts.baseUrl.replace(/\/+$/, ""), api_key: apiKey };
      await new ApiClient(creds).request("GET", "/v1/models");
      console.log(`logged in to ${creds.base_url}; credentials saved to ${await writeCredentials(creds, cli)}`);
    });
}

async function readKeyFile(path: string): Promise<string> {
  try {
    return (await readFile(path, "utf8")).trim();
  } catch (e) {
    throw new CliError(`--from-file ${path}: cannot read it (${(e as NodeJS.ErrnoException).code ?? "error"})`, 2);
  }
}

export function describeBootstrap(done: BootstrapOutcome): string {
  return done.outcome === "created"
    ? `bootstrap admin key registered as ${done.record.id}; Redis holds only its SHA-256, the key itself stays in your Secret`
    : `bootstrap admin key already registered (${done.record.id}); nothing changed`;
}

/**
 * The bootstrap a long-running process runs at every start (`gateway`, `up`; idempotent, so a
 * cluster needs no separate first-run step). A weak key stops it. A different key already
 * registered is logged and the process serves on: a changed Secret must not take the platform
 * down (compose would restart it forever), and the admin key registered before still works.
 * Resolves whether this key is the registered one.
 */
export async function bootstrapAtStart(ctl: Control, key: string, where: string): Promise<boolean> {
  const weak = weakKeyReason(key);
  if (weak) throw new CliError(`PLATFORM_BOOTSTRAP_ADMIN_KEY is too weak: ${weak}`, 2);
  try {
    console.log(describeBootstrap(await runBootstrap(ctl, key, where)));
    return true;
  } catch (e) {
    if (!(e instanceof CliError) || e.exitCode !== 1) throw e;
    console.error(`bootstrap: ${e.message}`);
    return false;
  }
}

/**
 * Register the bootstrap key, waiting a bounded time for Redis (a cluster may
 * start the gateway before Redis answers). Server-side refusals become CLI errors.
 */
export async function runBootstrap(ctl: Control, key: string, where: string): Promise<BootstrapOutcome> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const ok = await Promise.race([ctl.redis.ping().then(() => true, () => false), new Promise<boolean>((r) => setTimeout(() => r(false), 5_000).unref())]);
    if (ok) break;
    if (Date.now() > deadline) throw new CliError(`cannot reach Redis at ${where} (REDIS_URL); is it running, and is the password right?`);
    await new Promise((r) => setTimeout(r, 1_000));
  }
  try {
    return await bootstrapAdminKey(ctl, key);
  } catch (e) {
    if (e instanceof PlatformError) throw new CliError(e.message, e.status === 400 ? 2 : 1);
    throw e;
  }
}
