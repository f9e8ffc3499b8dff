/** `platform keys create|update|list|revoke|bootstrap`. */
import { readFile } from "node:fs/promises";
import { type Command, InvalidArgumentError } from "commander";
import { NAME_PATTERN } from "../contracts/deployment.ts";
import { MAX_PRIORITY, MIN_PRIORITY } from "../contracts/job.ts";
import { describeLimits, type KeyLimitsChange, type LimitField } from "../ratelimit/limits.ts";
import { describeBootstrap, runBootstrap } from "../keys/bootstrap.ts";
import type { ApiKey } from "../keys/record.ts";
import { generateApiKey, weakKeyReason } from "../keys/store.ts";
import { connectControl, maskRedisUrl } from "../redis/connection.ts";
import { loadSettings } from "../settings/index.ts";
import { ApiClient } from "../client/api.ts";
import { CliError } from "./common/errors.ts";
import { orNone, wholeNumber } from "./common/flags.ts";
import { orgFlag } from "./orgs.ts";
import { printJson, printTable } from "./common/output.ts";

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
      const limits = limitsFromFlags(opts);
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
      const limits = limitsFromFlags(opts);
      if (!limits)
        throw new CliError(
          "nothing to change: give --rpm, --tpm, --max-concurrency, --model-limit or --priority (a number, or none to remove it)",
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

/** One limit's value, or (with `keys update`) "none": the limit removed. */
type Limit = number | "none";
type ScopeFlags = Partial<Record<LimitField, number | null>>;
/** `--model-limit`s gathered, as the API takes them: each model's limits, or null (`<model>:none`) to remove them all. */
type ModelLimits = Record<string, ScopeFlags | null>;
type LimitFlags = { rpm?: Limit; tpm?: Limit; maxConcurrency?: Limit; modelLimit: ModelLimits; priority?: Limit };

/** `--priority`: the key's default priority band, lower first (src/queue/fair-share.ts). */
function priorityOf(text: string): number {
  const n = Number(text);
  if (!/^\s*-?\d+\s*$/.test(text) || n < MIN_PRIORITY || n > MAX_PRIORITY)
    throw new InvalidArgumentError(
      `expected a whole number from ${MIN_PRIORITY} to ${MAX_PRIORITY} (lower is served first)`,
    );
  return n;
}

const LIMIT = wholeNumber(1, 1_000_000_000);
const LIMIT_NAMES: Record<string, LimitField> = {
  rpm: "rpm",
  tpm: "tpm",
  "max-concurrency": "max_concurrency",
  max_concurrency: "max_concurrency",
};

/** The limit flags `keys create` and `keys update` share; `update` also takes `none`. */
function limitOptions(command: Command, update = false): Command {
  const value = update ? "<n|none>" : "<n>";
  const limit = update ? orNone(LIMIT) : LIMIT;
  return command
    .option(`--rpm ${value}`, "requests per minute (any 60 s)", limit)
    .option(
      `--tpm ${value}`,
      "tokens per minute, prompt + completion (reserved at admission, settled at completion)",
      limit,
    )
    .option(`--max-concurrency ${value}`, "requests in flight at once", limit)
    .option(
      `--priority ${update ? "<p|none>" : "<p>"}`,
      `the priority band of its requests that name none, ${MIN_PRIORITY} to ${MAX_PRIORITY}, lower first (default 0)`,
      update ? orNone(priorityOf) : priorityOf,
    )
    .option(
      "--model-limit <spec>",
      `limits for one model through this key, on top of the key's own: <model>:rpm=N,tpm=N,max-concurrency=N${update ? " (N or none; <model>:none removes them all)" : ""}; repeatable`,
      modelLimit(update),
      {},
    );
}

/** `--model-limit <model>:rpm=N,...` (or, to update, `<model>:none`), added to those before it. */
export function modelLimit(update: boolean): (spec: string, all: ModelLimits) => ModelLimits {
  const form = `expected <model>:rpm=N,tpm=N,max-concurrency=N${update ? " or <model>:none" : ""}`;
  const number = update ? orNone(LIMIT) : LIMIT;
  return (spec, all) => {
    const m = /^([^:]+):(.+)$/.exec(spec);
    if (!m || !NAME_PATTERN.test(m[1] as string)) throw new InvalidArgumentError(form);
    const [, model, rest] = m as unknown as [string, string, string];
    if (rest === "none") {
      if (!update) throw new InvalidArgumentError(`none removes limits, so it belongs to \`keys update\`; ${form}`);
      return { ...all, [model]: null };
    }
    const limits: ScopeFlags = { ...all[model] };
    for (const part of rest.split(",")) {
      const [name, text] = part.split("=");
      const field = LIMIT_NAMES[name?.trim() ?? ""];
      if (!field || text === undefined) throw new InvalidArgumentError(`"${part}" is not a limit; ${form}`);
      try {
        const value = number(text.trim());
        limits[field] = value === "none" ? null : value;
      } catch (e) {
        throw new InvalidArgumentError(`${name}: ${(e as Error).message}`);
      }
    }
    return { ...all, [model]: limits };
  };
}

/** The parsed flags as the management API's `limits` (src/ratelimit/limits.ts); undefined when none was given. */
export function limitsFromFlags(flags: LimitFlags): KeyLimitsChange | undefined {
  const out: KeyLimitsChange = {};
  const limit = (value: Limit) => (value === "none" ? null : value);
  if (flags.rpm !== undefined) out.rpm = limit(flags.rpm);
  if (flags.tpm !== undefined) out.tpm = limit(flags.tpm);
  if (flags.maxConcurrency !== undefined) out.max_concurrency = limit(flags.maxConcurrency);
  if (flags.priority !== undefined) out.priority = limit(flags.priority);
  if (Object.keys(flags.modelLimit).length > 0) out.models = flags.modelLimit;
  return Object.keys(out).length > 0 ? out : undefined;
}

async function readKeyFile(path: string): Promise<string> {
  try {
    return (await readFile(path, "utf8")).trim();
  } catch (e) {
    throw new CliError(`--from-file ${path}: cannot read it (${(e as NodeJS.ErrnoException).code ?? "error"})`, 2);
  }
}
