/**
 * The credential a pull runs with, as a file the puller reads (docs/services.md, "Pulling from a
 * private registry"): an organization's own credential or the platform's pull grant is written to
 * a containers auth.json, 0600, in a private temp directory (0700) made for that one pull and
 * removed after it, so no password is ever in a command line that `ps` shows or left on disk.
 * The operator's PLATFORM_IMAGE_PULL_AUTH_FILE is used as it is.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fixPullCommand, type PullAuth } from "../../../src/registry-credentials/resolve.ts";

/** Where a runner gets the credential for an organization's repository (PullAuthResolver.resolve). */
export type PullAuthSource = (org: string, repository: string) => Promise<PullAuth>;

/** A containers auth.json (docker's config.json has the same `auths`) holding one basic credential. */
export function authJson(host: string, username: string, password: string): string {
  return JSON.stringify({ auths: { [host]: { auth: Buffer.from(`${username}:${password}`).toString("base64") } } });
}

/** Runs `pull` with the path of an auth.json for `auth` (undefined: none), removed afterwards. */
export async function withAuthFile<T>(auth: PullAuth, pull: (authFile: string | undefined) => Promise<T>): Promise<T> {
  if (auth.source === "none") return pull(undefined);
  if (auth.source === "operator") return pull(auth.authFile);
  const dir = await mkdtemp(join(tmpdir(), "platform-pull-"));
  try {
    const file = join(dir, "auth.json");
    await writeFile(file, authJson(auth.host, auth.username, auth.password), { mode: 0o600 });
    return await pull(file);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** What a refused pull adds after "not logged in to <host>": which credential was refused, and the fix. */
export function refusedHint(auth: PullAuth, host: string): string {
  const fix = `an admin of the organization runs: ${fixPullCommand(host)}`;
  switch (auth.source) {
    case "organization":
      return ` (the organization's credential for ${host} is not accepted); ${fix}`;
    case "token_server":
      return ` (the registry refused the platform's pull token); ${fix}`;
    case "operator":
      return ` (the operator's PLATFORM_IMAGE_PULL_AUTH_FILE is not accepted); ${fix}`;
    case "none":
      return ` (no pull credential for ${host}); ${fix}`;
  }
}
