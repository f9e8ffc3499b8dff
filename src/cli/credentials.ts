/** The credentials file (`~/.config/platform/credentials.json`, mode 0600) and its overrides. */
import { chmod, mkdir, readFile, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { z } from "zod";
import { CliError } from "./errors.ts";

export const Credentials = z.object({ base_url: z.string().url(), api_key: z.string().min(1) });
export type Credentials = z.infer<typeof Credentials>;

export function credentialsPath(env: NodeJS.ProcessEnv = process.env): string {
  if (env.PLATFORM_CONFIG_DIR) return join(env.PLATFORM_CONFIG_DIR, "credentials.json");
  const base = env.XDG_CONFIG_HOME && env.XDG_CONFIG_HOME.length > 0 ? env.XDG_CONFIG_HOME : join(homedir(), ".config");
  return join(base, "platform", "credentials.json");
}

export async function readCredentials(): Promise<Credentials | undefined> {
  let raw: string;
  try {
    raw = await readFile(credentialsPath(), "utf8");
  } catch {
    return undefined;
  }
  const parsed = Credentials.safeParse(JSON.parse(raw));
  return parsed.success ? parsed.data : undefined;
}

export async function writeCredentials(creds: Credentials): Promise<string> {
  const path = credentialsPath();
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  await writeFile(path, `${JSON.stringify(creds, null, 2)}\n`, { mode: 0o600 });
  await chmod(path, 0o600); // writeFile keeps an existing file's mode
  return path;
}

/** Environment variables win over the file, so scripts and CI need no file. */
export async function resolveCredentials(): Promise<Credentials> {
  const file = await readCredentials();
  const base_url = process.env.PLATFORM_BASE_URL ?? file?.base_url;
  const api_key = process.env.PLATFORM_API_KEY ?? file?.api_key;
  if (!base_url || !api_key) {
    throw new CliError(
      `not logged in: no credentials in ${credentialsPath()} and PLATFORM_BASE_URL/PLATFORM_API_KEY are not set.\n` +
        "Start a platform with `npx platform up` (it writes the file), or run `platform auth login --base-url <url> --api-key <key>`.",
    );
  }
  return { base_url: base_url.replace(/\/+$/, ""), api_key };
}

