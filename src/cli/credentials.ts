/**
 * The credentials file (`~/.config/platform/credentials.json`, mode 0600) and its overrides. Where
 * it lives and the overrides come from the settings' cli section (PLATFORM_CONFIG_DIR,
 * PLATFORM_BASE_URL, PLATFORM_API_KEY); a client command loads that section alone.
 */
import { chmod, mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname } from "node:path";
import { z } from "zod";
import { type CliSettings, loadCliSettings } from "../settings/cli.ts";
import { CliError } from "./errors.ts";

export const Credentials = z.object({ base_url: z.string().url(), api_key: z.string().min(1) });
export type Credentials = z.infer<typeof Credentials>;

export function credentialsPath(cli: CliSettings = loadCliSettings()): string {
  return cli.credentialsFile;
}

export async function readCredentials(cli: CliSettings = loadCliSettings()): Promise<Credentials | undefined> {
  let raw: string;
  try {
    raw = await readFile(cli.credentialsFile, "utf8");
  } catch {
    return undefined;
  }
  const parsed = Credentials.safeParse(JSON.parse(raw));
  return parsed.success ? parsed.data : undefined;
}

export async function writeCredentials(creds: Credentials, cli: CliSettings = loadCliSettings()): Promise<string> {
  const path = cli.credentialsFile;
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  await writeFile(path, `${JSON.stringify(creds, null, 2)}\n`, { mode: 0o600 });
  await chmod(path, 0o600); // writeFile keeps an existing file's mode
  return path;
}

/** Environment variables win over the file, so scripts and CI need no file. */
export async function resolveCredentials(cli: CliSettings = loadCliSettings()): Promise<Credentials> {
  const file = await readCredentials(cli);
  const base_url = cli.baseUrl ?? file?.base_url;
  const api_key = cli.apiKey ?? file?.api_key;
  if (!base_url || !api_key) {
    throw new CliError(
      `not logged in: no credentials in ${cli.credentialsFile} and PLATFORM_BASE_URL/PLATFORM_API_KEY are not set.\n` +
        "Start a platform with `npx platform up` (it writes the file), or run `platform auth login --base-url <url> --api-key <key>`.",
    );
  }
  return { base_url: base_url.replace(/\/+$/, ""), api_key };
}
