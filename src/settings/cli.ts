/**
 * The cli section: where the CLI keeps its credentials, the overrides scripts set, how batch files
 * travel, and the browser sign-in opens.
 */
import { homedir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { optional, parse } from "./parse.ts";

export const cliShape = {
  PLATFORM_CONFIG_DIR: optional(z.string()),
  /** Only for the default config directory, as the XDG base-directory spec says. */
  XDG_CONFIG_HOME: optional(z.string()),
  PLATFORM_BASE_URL: optional(
    z
      .string()
      .refine(
        (text) => URL.canParse(text) && /^https?:$/.test(new URL(text).protocol),
        "expected the gateway's http(s) URL, e.g. http://127.0.0.1:8000",
      ),
  ),
  PLATFORM_API_KEY: optional(z.string()),
  PLATFORM_CLI_UPLOAD: optional(z.enum(["auto", "always", "never"], { message: "expected auto, always or never" })),
  /** The convention `gh`, `git` and Python's webbrowser follow: a command that opens a URL. */
  BROWSER: optional(z.string()),
};

export type CliSettings = {
  /** `credentials.json` in PLATFORM_CONFIG_DIR, else `$XDG_CONFIG_HOME/platform`, else `~/.config/platform`. */
  credentialsFile: string;
  /**
   * Win over the credentials file, so scripts and CI need no file: the registry unless a command
   * names one or the workspace's `.platformrc.json` does (src/client/credentials.ts), and its key.
   */
  baseUrl: string | undefined;
  apiKey: string | undefined;
  /** `platform inference batch --upload`'s default; unset means auto. */
  upload: "auto" | "always" | "never" | undefined;
  /** `platform auth login` opens its URL with this command (BROWSER) when set, else the system's opener. */
  browser: string | undefined;
};

export function cliSettings(e: z.infer<z.ZodObject<typeof cliShape>>): CliSettings {
  const dir = e.PLATFORM_CONFIG_DIR ?? join(e.XDG_CONFIG_HOME ?? join(homedir(), ".config"), "platform");
  return {
    credentialsFile: join(dir, "credentials.json"),
    baseUrl: e.PLATFORM_BASE_URL,
    apiKey: e.PLATFORM_API_KEY,
    upload: e.PLATFORM_CLI_UPLOAD,
    browser: e.BROWSER,
  };
}

/**
 * The cli section alone, for the client commands: a server variable left in a user's shell
 * (a half-set AWS key, say) must not stop `platform inference list`.
 */
export function loadCliSettings(env: NodeJS.ProcessEnv = process.env): CliSettings {
  return cliSettings(parse(z.object(cliShape), env));
}
