/**
 * The credentials file (`~/.config/platform/credentials.json`, mode 0600 in a 0700 directory): one
 * entry per registry (a platform's base URL) holding an API key or a CLI token with its refresh
 * token, and the registry used when nothing names one. Where it lives and the overrides come from
 * the settings' cli section (PLATFORM_CONFIG_DIR, PLATFORM_BASE_URL, PLATFORM_API_KEY); a client
 * command loads that section alone.
 *
 * It is written whole to a temp file and renamed, so a reader never sees half a file, and changed
 * under a lock file, so two commands refreshing a token at once do not both spend the refresh
 * token (the second would look like theft and end the session, src/tokens/store.ts).
 */
import { randomBytes } from "node:crypto";
import { chmod, mkdir, open, readFile, rename, rm, stat } from "node:fs/promises";
import { dirname } from "node:path";
import { z } from "zod";
import { type CliSettings, loadCliSettings } from "../settings/cli.ts";
import { CommandError } from "../process/command-error.ts";
import { findWorkspace } from "../workspace/find.ts";

export const RegistryEntry = z.object({
  api_key: z.string().min(1).optional(),
  token: z.string().min(1).optional(),
  refresh_token: z.string().min(1).optional(),
  /** When `token` expires, ISO 8601. */
  expires: z.iso.datetime().optional(),
});
export type RegistryEntry = z.infer<typeof RegistryEntry>;

export const CredentialsFile = z.object({
  registries: z.record(z.string(), RegistryEntry),
  default: z.string().optional(),
});
export type CredentialsFile = z.infer<typeof CredentialsFile>;

/** The form before registries: one platform, one key. Read as one entry, and rewritten in the new form on the next write. */
const LegacyCredentials = z.object({ base_url: z.string().url(), api_key: z.string().min(1) });

/** One registry's credentials as a command uses them: a base URL and an API key or a token. */
export type Credentials = { base_url: string } & RegistryEntry;

/** A registry's URL as entries are keyed: origin and path, without trailing slashes. */
export function normalizeBaseUrl(url: string): string {
  const parsed = new URL(url);
  return `${parsed.origin}${parsed.pathname.replace(/\/+$/, "")}`;
}

export function credentialsPath(cli: CliSettings = loadCliSettings()): string {
  return cli.credentialsFile;
}

/** The file's entries; none when it does not exist. A file in neither form is an error naming it. */
export async function readCredentials(cli: CliSettings = loadCliSettings()): Promise<CredentialsFile> {
  let raw: string;
  try {
    raw = await readFile(cli.credentialsFile, "utf8");
  } catch {
    return { registries: {} };
  }
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    throw new CommandError(`${cli.credentialsFile}: not valid JSON; run \`platform auth login\` to write it again`);
  }
  const legacy = LegacyCredentials.safeParse(json);
  if (legacy.success) {
    const url = normalizeBaseUrl(legacy.data.base_url);
    return { registries: { [url]: { api_key: legacy.data.api_key } }, default: url };
  }
  const parsed = CredentialsFile.safeParse(json);
  if (!parsed.success)
    throw new CommandError(
      `${cli.credentialsFile}: expected {"registries": {"<base URL>": {...}}, "default"?}; run \`platform auth login\` to write it again`,
    );
  return parsed.data;
}

const LOCK_WAIT_MS = 10_000;
/** A lock older than this was left by a command that died holding it. */
const LOCK_STALE_MS = 30_000;

/** Runs `work` holding the credentials file's lock (`<file>.lock`, made with O_EXCL). */
async function withCredentialsLock<T>(cli: CliSettings, work: () => Promise<T>): Promise<T> {
  const lock = `${cli.credentialsFile}.lock`;
  await privateDir(dirname(cli.credentialsFile));
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
      await (await open(lock, "wx", 0o600)).close();
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      const age = Date.now() - ((await stat(lock).catch(() => undefined))?.mtimeMs ?? Date.now());
      if (age > LOCK_STALE_MS) await rm(lock, { force: true });
      else if (Date.now() > deadline)
        throw new CommandError(`${lock} is held by another platform command; if none is running, delete it`);
      else await new Promise((r) => setTimeout(r, 50));
    }
  }
  try {
    return await work();
  } finally {
    await rm(lock, { force: true });
  }
}

async function privateDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  // mkdir leaves an existing directory's mode alone: it holds secrets, so it is this user's only.
  if (((await stat(dir)).mode & 0o077) !== 0) await chmod(dir, 0o700);
}

/** The whole file, replaced atomically: a temp file (0600) beside it, fsynced, renamed over it. */
async function writeFileAtomically(path: string, file: CredentialsFile): Promise<void> {
  await privateDir(dirname(path));
  const temp = `${path}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`;
  const handle = await open(temp, "wx", 0o600);
  try {
    await handle.writeFile(`${JSON.stringify(file, null, 2)}\n`);
    await handle.sync();
  } finally {
    await handle.close();
  }
  try {
    await rename(temp, path);
  } catch (e) {
    await rm(temp, { force: true });
    throw e;
  }
}

/**
 * Reads the file, lets `change` change it (it may wait, e.g. for a token refresh; throwing leaves
 * the file as it was) and writes it, all under the file's lock; resolves what `change` returned.
 * A file that does not parse is kept aside as `<file>.invalid` and a new one begun, so signing in
 * again mends it.
 */
export async function updateCredentials<T>(
  change: (file: CredentialsFile) => T | Promise<T>,
  cli: CliSettings = loadCliSettings(),
): Promise<T> {
  return withCredentialsLock(cli, async () => {
    const file = await readCredentials(cli).catch(async (e: unknown) => {
      if (!(e instanceof CommandError)) throw e;
      await rename(cli.credentialsFile, `${cli.credentialsFile}.invalid`);
      console.error(`note: ${cli.credentialsFile} did not parse; kept as ${cli.credentialsFile}.invalid`);
      return { registries: {} } as CredentialsFile;
    });
    const result = await change(file);
    await writeFileAtomically(cli.credentialsFile, file);
    return result;
  });
}

/**
 * Saves an API key as the entry for its base URL (replacing a token there: a new sign-in) and makes
 * it the default registry, as `platform up` and `platform auth login --api-key` do.
 */
export async function writeCredentials(
  creds: { base_url: string; api_key: string },
  cli: CliSettings = loadCliSettings(),
): Promise<string> {
  const url = normalizeBaseUrl(creds.base_url);
  await updateCredentials((file) => {
    file.registries[url] = { api_key: creds.api_key };
    file.default = url;
  }, cli);
  return cli.credentialsFile;
}

/**
 * The registry a command talks to: an explicit URL, else the workspace's `.platformrc.json`
 * `registryUrl`, else PLATFORM_BASE_URL, else the credentials file's default.
 */
export async function resolveRegistry(
  cli: CliSettings,
  file: CredentialsFile,
  explicit?: string,
): Promise<string | undefined> {
  const url = explicit ?? (await findWorkspace())?.config.registryUrl ?? cli.baseUrl ?? file.default;
  return url === undefined ? undefined : normalizeBaseUrl(url);
}

/**
 * The registry and its credential, or just the registry (`credentials` undefined) when none is
 * stored for it; PLATFORM_API_KEY wins over the file, so scripts and CI need no file.
 */
export async function findCredentials(
  cli: CliSettings = loadCliSettings(),
  explicit?: string,
): Promise<{ base_url: string | undefined; credentials: Credentials | undefined }> {
  const file = await readCredentials(cli);
  const base_url = await resolveRegistry(cli, file, explicit);
  const entry = base_url === undefined ? undefined : file.registries[base_url];
  const credential: RegistryEntry | undefined = cli.apiKey ? { api_key: cli.apiKey } : entry;
  const found = base_url !== undefined && (credential?.api_key || credential?.token);
  return { base_url, credentials: found ? { base_url, ...credential } : undefined };
}

/** The registry and its credential; none is an error saying how to sign in. */
export async function resolveCredentials(
  cli: CliSettings = loadCliSettings(),
  explicit?: string,
): Promise<Credentials> {
  const { base_url, credentials } = await findCredentials(cli, explicit);
  if (!credentials) {
    throw new CommandError(
      `not logged in${base_url ? ` to ${base_url}` : ""}: no credentials in ${cli.credentialsFile} and PLATFORM_BASE_URL/PLATFORM_API_KEY are not set.\n` +
        "Start a platform with `npx platform up` (it writes the file), or sign in with `platform auth login --registry-url <url>` (a browser; --api-key <key> for scripts).",
    );
  }
  return credentials;
}
