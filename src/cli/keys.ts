/** `platform keys create|update|list|revoke|bootstrap`. */
import { readFile } from "node:fs/promises";
import type { Command } from "commander";
import { NAME_PATTERN } from "../contracts/deployment.ts";
import { describeLimits, type KeyLimitsChange, type LimitField } from "../ratelimit/limits.ts";
import type { ApiKey } from "../keys/key.ts";
import { bootstrapAdminKey, type BootstrapOutcome, generateApiKey, weakKeyReason } from "../keys/store.ts";
import { type Control, connectControl, maskRedisUrl } from "../redis/connection.ts";
import { PlatformError } from "../contracts/errors.ts";
import { loadSettings } from "../settings/index.ts";
import { ApiClient } from "./client.ts";
import { CliError } from "./errors.ts";
import { orgFlag } from "./orgs.ts";
import { printJson, printTable } from "./output.ts";

type PublicKey = Omit<ApiKey, "hash">;

export function registerKeys(program: Command): void {
  const keys = program.command("keys").description("manage API keys (admin)");
  limitOptions(
    keys
      .command("create <name>")
      .description("create an API key, optionally with rate limits (shown once)")
      .option("--role <role>", "admin or user", "user")
      .option("--org <id>", "the organization it belongs to (default: your own; another one needs an operator)"),
  )
    .option("--json", "print JSON")
    .action(async (name: string, opts: LimitFlags & { role: string; org?: string; json?: boolean }) => {
      if (opts.role !== "admin" && opts.role !== "user")
        throw new CliError(`--role: expected admin or user, got "${opts.role}"`, 2);
      const org = orgFlag(opts.org);
      const limits = limitsFromFlags(opts, false);
      const api = await ApiClient.fromCredentials();
      const created = await api.request<PublicKey & { key: string }>("POST", "/admin/v1/keys", {
        name,
        role: opts.role,
        ...(org ? { org } : {}),
        ...(limits ? { limits } : {}),
      });
      if (opts.json) return printJson(created);
      console.log(
        `created ${created.role} key ${created.id} (${created.name}) in organization ${created.org}, limits: ${describeLimits(created.limits)}. It is shown only now:\n${created.key}`,
      );
    });
  limitOptions(
    keys
      .command("update <id>")
      .description(
        "change a key's rate limits: a number sets one, none removes it, a flag left out keeps it (gateways apply it within 5 s)",
      ),
    true,
  )
    .option("--json", "print JSON")
    .action(async (id: string, opts: LimitFlags & { json?: boolean }) => {
      if (!KEY_ID.test(id))
        throw new CliError(
          `<id> "${id}": expected a key id such as key_0123456789ab (\`platform keys list\` shows them)`,
          2,
        );
      const limits = limitsFromFlags(opts, true);
      if (!limits)
        throw new CliError(
          "nothing to change: give --rpm, --tpm, --max-concurrency or --model-limit (a number, or none to remove the limit)",
          2,
        );
      const api = await ApiClient.fromCredentials();
      const updated = await api.request<PublicKey>("PATCH", `/admin/v1/keys/${encodeURIComponent(id)}`, { limits });
      if (opts.json) return printJson(updated);
      console.log(`updated ${updated.id} (${updated.name}), limits: ${describeLimits(updated.limits)}`);
    });
  keys
    .command("list")
    .description("your organization's keys (an operator's: every organization's, or --org's)")
    .option("--org <id>", "only this organization's keys (operators)")
    .option("--json", "print JSON")
    .action(async (opts: { org?: string; json?: boolean }) => {
      const org = orgFlag(opts.org);
      const api = await ApiClient.fromCredentials();
      const { data } = await api.request<{ data: PublicKey[] }>(
        "GET",
        `/admin/v1/keys${org ? `?org=${encodeURIComponent(org)}` : ""}`,
      );
      if (opts.json) return printJson(data);
      printTable(
        ["ID", "NAME", "ORG", "ROLE", "PREFIX", "LIMITS", "CREATED"],
        data.map((k) => [
          k.id,
          k.name,
          k.org,
          k.role,
          `${k.prefix}…`,
          describeLimits(k.limits),
          new Date(k.created * 1000).toISOString(),
        ]),
      );
    });
  keys
    .command("bootstrap")
    .description(
      "register the first admin key from PLATFORM_BOOTSTRAP_ADMIN_KEY or --from-file, straight into Redis (REDIS_URL); idempotent",
    )
    .option(
      "--from-file <path>",
      "read the key from this file (a mounted Secret) instead of PLATFORM_BOOTSTRAP_ADMIN_KEY",
    )
    .option("--generate", "print a fresh strong key to put in the Secret, and store nothing")
    .option("--json", "print JSON")
    .action(async (opts: { fromFile?: string; generate?: boolean; json?: boolean }) => {
      if (opts.generate) {
        if (opts.fromFile)
          throw new CliError(
            "--generate and --from-file do not go together: generate a key, store it in the Secret, then bootstrap from it",
            2,
          );
        return console.log(opts.json ? JSON.stringify({ key: generateApiKey() }) : generateApiKey());
      }
      const settings = loadSettings();
      const key = opts.fromFile ? await readKeyFile(opts.fromFile) : settings.bootstrapAdminKey;
      if (!key)
        throw new CliError(
          "no key: set PLATFORM_BOOTSTRAP_ADMIN_KEY or give --from-file <path> (`platform keys bootstrap --generate` makes one)",
          2,
        );
      const weak = weakKeyReason(key);
      if (weak) throw new CliError(`the bootstrap admin key is too weak: ${weak}`, 2);
      if (!settings.redisUrl)
        throw new CliError(
          "REDIS_URL is not set; `keys bootstrap` writes to the platform's Redis directly, since no admin key exists yet",
          2,
        );
      const ctl = connectControl(settings.redisUrl, settings.prefix);
      try {
        const done = await runBootstrap(ctl, key, maskRedisUrl(settings.redisUrl));
        if (opts.json)
          return printJson({
            outcome: done.outcome,
            id: done.record.id,
            name: done.record.name,
            role: done.record.role,
          });
        console.log(describeBootstrap(done));
      } finally {
        ctl.redis.disconnect();
      }
    });
  keys.command("revoke <id>").action(async (id: string) => {
    const api = await ApiClient.fromCredentials();
    await api.request("DELETE", `/admin/v1/keys/${encodeURIComponent(id)}`);
    console.log(`revoked ${id}`);
  });
}

const KEY_ID = /^key_[0-9a-f]{12}$/;

type LimitFlags = { rpm?: string; tpm?: string; maxConcurrency?: string; modelLimit: string[] };

/** The limit flags `keys create` and `keys update` share; `update` also takes `none`. */
function limitOptions(command: Command, update = false): Command {
  const value = update ? "<n|none>" : "<n>";
  return command
    .option(`--rpm ${value}`, "requests per minute (any 60 s)")
    .option(`--tpm ${value}`, "tokens per minute, prompt + completion (reserved at admission, settled at completion)")
    .option(`--max-concurrency ${value}`, "requests in flight at once")
    .option(
      "--model-limit <spec>",
      `limits for one model through this key, on top of the key's own: <model>:rpm=N,tpm=N,max-concurrency=N${update ? " (N or none; <model>:none removes them all)" : ""}; repeatable`,
      (spec: string, all: string[]) => [...all, spec],
      [],
    );
}

/**
 * The flags as the management API's `limits` (src/ratelimit/limits.ts), checked here so bad input
 * exits 2 naming the flag before anything is sent. Undefined when no limit flag was given.
 */
export function limitsFromFlags(flags: LimitFlags, update: boolean): KeyLimitsChange | undefined {
  const out: KeyLimitsChange = {};
  const scope = (
    target: Partial<Record<LimitField, number | null>>,
    field: LimitField,
    text: string | undefined,
    flag: string,
  ) => {
    if (text === undefined) return;
    if (update && text === "none") {
      target[field] = null;
      return;
    }
    const n = Number(text);
    if (!/^\d+$/.test(text) || !Number.isSafeInteger(n) || n < 1 || n > 1_000_000_000) {
      throw new CliError(
        `${flag}: expected a whole number from 1 to 1000000000${update ? " or none" : ""}, got "${text}"`,
        2,
      );
    }
    target[field] = n;
  };
  scope(out, "rpm", flags.rpm, "--rpm");
  scope(out, "tpm", flags.tpm, "--tpm");
  scope(out, "max_concurrency", flags.maxConcurrency, "--max-concurrency");
  for (const spec of flags.modelLimit) {
    const m = /^([^:]+):(.+)$/.exec(spec);
    const form = `expected <model>:rpm=N,tpm=N,max-concurrency=N${update ? " or <model>:none" : ""}`;
    if (!m || !NAME_PATTERN.test(m[1] as string)) throw new CliError(`--model-limit "${spec}": ${form}`, 2);
    const [, model, rest] = m as unknown as [string, string, string];
    out.models ??= {};
    if (rest === "none") {
      if (!update)
        throw new CliError(
          `--model-limit "${spec}": none removes limits, so it belongs to \`keys update\`; ${form}`,
          2,
        );
      out.models[model] = null;
      continue;
    }
    const limits: Partial<Record<LimitField, number | null>> = { ...out.models[model] };
    for (const part of rest.split(",")) {
      const [name, text] = part.split("=");
      const field = (
        { rpm: "rpm", tpm: "tpm", "max-concurrency": "max_concurrency", max_concurrency: "max_concurrency" } as Record<
          string,
          LimitField
        >
      )[name?.trim() ?? ""];
      if (!field || text === undefined)
        throw new CliError(`--model-limit "${spec}": "${part}" is not a limit; ${form}`, 2);
      scope(limits, field, text.trim(), `--model-limit "${spec}"`);
    }
    out.models[model] = limits;
  }
  return Object.keys(out).length > 0 ? out : undefined;
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
    const ok = await Promise.race([
      ctl.redis.ping().then(
        () => true,
        () => false,
      ),
      new Promise<boolean>((r) => setTimeout(() => r(false), 5_000).unref()),
    ]);
    if (ok) break;
    if (Date.now() > deadline)
      throw new CliError(`cannot reach Redis at ${where} (REDIS_URL); is it running, and is the password right?`);
    await new Promise((r) => setTimeout(r, 1_000));
  }
  try {
    return await bootstrapAdminKey(ctl, key);
  } catch (e) {
    if (e instanceof PlatformError) throw new CliError(e.message, e.status === 400 ? 2 : 1);
    throw e;
  }
}
