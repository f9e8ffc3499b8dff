/**
 * Sessions with an image registry, as builders keep them (docs/publish.md, "Registry login"): which
 * file a builder reads (buildah and podman: containers-auth.json(5); docker: config.json), the
 * credentials stored there for a host, and the registry's own answer to them on `GET /v2/`, the
 * distribution spec's "am I allowed in" call. `platform publish` asks before it builds, so an
 * expired session costs a second, not a build; `platform doctor` asks the same.
 *
 * Secrets read here (the stored password, a registry token) go only to the registry they are for:
 * never into an error, a log line or `--json`.
 */
import { readFile } from "node:fs/promises";
import { CommandError } from "../process/command-error.ts";
import type { ToolSettings } from "../settings/tools.ts";
import type { Builder } from "./build.ts";

/** The host (and port) of a repository `host[:port]/path`. */
export function imageRegistryHost(repository: string): string {
  return repository.split("/")[0] as string;
}

/** 127.0.0.0/8, localhost, [::1]: a registry only this machine reaches. */
export function isLoopback(host: string): boolean {
  const name = host.startsWith("[") ? host.slice(0, host.indexOf("]") + 1) : (host.split(":")[0] as string);
  return name === "localhost" || name === "[::1]" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(name);
}

/**
 * Whether to talk plain HTTP to the registry and skip TLS verification (`--tls-verify=false`): only
 * for a loopback registry, or for the platform's own host when its URL is http:// (the registry
 * is then the platform's, on the same host and scheme). Everything else is verified HTTPS.
 */
export function isPlainHttp(host: string, platformUrl?: string): boolean {
  if (isLoopback(host)) return true;
  if (!platformUrl) return false;
  const url = new URL(platformUrl);
  return url.protocol === "http:" && url.host === host;
}

/** The file a builder keeps its sessions in, and the ones it reads them from in order. */
export function authFilesOf(builder: Builder, tools: ToolSettings): { writes: string; reads: string[] } {
  if (builder === "docker") return { writes: tools.dockerConfigFile, reads: [tools.dockerConfigFile] };
  return { writes: tools.containersAuthFile, reads: tools.registryAuthFiles };
}

type AuthFile = {
  auths?: Record<string, { auth?: string; username?: string; password?: string; identitytoken?: string }>;
  credHelpers?: Record<string, string>;
  credsStore?: string;
};

/** A key of `auths` as docker and podman write it: a host, or a URL of one (`https://index.docker.io/v1/`). */
const hostOf = (key: string) => key.replace(/^https?:\/\//, "").replace(/\/.*$/, "");

export type StoredSession =
  | { kind: "basic"; file: string; username: string; password: string }
  | { kind: "helper"; file: string; helper: string }
  | { kind: "none"; searched: string[] };

/** The session stored for `host` in the first of `files` that has one; a credential helper is reported, not run. */
export async function storedSession(host: string, files: string[]): Promise<StoredSession> {
  let store: { file: string; helper: string } | undefined;
  for (const file of files) {
    const auth = await readFile(file, "utf8").then(
      (text) => JSON.parse(text) as AuthFile,
      () => undefined,
    );
    if (!auth) continue;
    const entry = Object.entries(auth.auths ?? {}).find(([key]) => hostOf(key) === host)?.[1];
    if (entry) {
      let [username, password] = [entry.username, entry.password];
      if (entry.auth) {
        const text = Buffer.from(entry.auth, "base64").toString("utf8");
        const colon = text.indexOf(":");
        [username, password] = [text.slice(0, colon), text.slice(colon + 1)];
      }
      if (username !== undefined && password !== undefined) return { kind: "basic", file, username, password };
    }
    const helper = auth.credHelpers?.[host];
    if (helper) return { kind: "helper", file, helper };
    if (auth.credsStore) store ??= { file, helper: auth.credsStore };
  }
  return store ? { kind: "helper", ...store } : { kind: "none", searched: files };
}

export type ImageRegistryAnswer =
  /** 200: in (with the credentials given, or the registry is open). */
  | { status: "ok"; url: string }
  /** 401: the credentials were refused, or none were given to a registry that needs them. */
  | { status: "unauthorized"; url: string }
  | { status: "unreachable"; url: string; message: string }
  | { status: "unexpected"; url: string; message: string };

const PROBE_TIMEOUT_MS = 10_000;

/** `Bearer realm="…",service="…",scope="…"` → its parameters; undefined for another scheme. */
function bearerChallenge(header: string | null): Record<string, string> | undefined {
  if (!header || !/^bearer\s/i.test(header)) return undefined;
  const params: Record<string, string> = {};
  for (const m of header.slice(7).matchAll(/(\w+)="([^"]*)"/g)) params[m[1] as string] = m[2] as string;
  return params.realm ? params : undefined;
}

/**
 * `GET /v2/` on the registry, with the credentials when given: Basic auth, or the Bearer token
 * exchange Docker Distribution's token auth asks for (the realm's token endpoint, given the same
 * credentials). Any answer from a registry (200 or 401) means it is reachable.
 */
export async function askImageRegistry(
  host: string,
  options: { plainHttp: boolean; credentials?: { username: string; password: string } },
): Promise<ImageRegistryAnswer> {
  const url = `${options.plainHttp ? "http" : "https"}://${host}/v2/`;
  const basic = options.credentials
    ? `Basic ${Buffer.from(`${options.credentials.username}:${options.credentials.password}`).toString("base64")}`
    : undefined;
  const get = async (target: string, authorization?: string) => {
    return fetch(target, {
      headers: authorization ? { authorization } : {},
      signal: AbortSignal.timeout(PROBE_TIMEOUT_MS),
      redirect: "follow",
    });
  };
  try {
    let res = await get(url, basic);
    const challenge = bearerChallenge(res.headers.get("www-authenticate"));
    if (res.status === 401 && challenge && basic) {
      const realm = new URL(challenge.realm as string);
      if (challenge.service) realm.searchParams.set("service", challenge.service);
      const grant = await get(realm.href, basic);
      if (grant.status === 401 || grant.status === 403) return { status: "unauthorized", url };
      const body = (await grant.json().catch(() => ({}))) as { token?: string; access_token?: string };
      const token = body.token ?? body.access_token;
      if (!grant.ok || !token)
        return {
          status: "unexpected",
          url,
          message: `its token endpoint ${realm.origin} answered HTTP ${grant.status}`,
        };
      res = await get(url, `Bearer ${token}`);
    }
    if (res.status === 200) return { status: "ok", url };
    if (res.status === 401) return { status: "unauthorized", url };
    return { status: "unexpected", url, message: `${url} answered HTTP ${res.status}, not as a registry (200 or 401)` };
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    return { status: "unreachable", url, message: cause?.code ?? cause?.message ?? (e as Error).message };
  }
}

/** The line `platform publish` exits with when the registry refuses it, word for word (docs/publish.md). */
export const notLoggedIn = (host: string) => `not logged in to ${host}: run platform registry login`;

/** Where an image registry sends builders for tokens: its `Bearer` challenge's realm, or why there is none. */
export async function tokenRealm(host: string, plainHttp: boolean): Promise<string> {
  const url = `${plainHttp ? "http" : "https"}://${host}/v2/`;
  let res: Response;
  try {
    res = await fetch(url, { signal: AbortSignal.timeout(10_000) });
  } catch (e) {
    const cause = (e as { cause?: { code?: string } }).cause?.code ?? (e as Error).message;
    throw new CommandError(`cannot reach the image registry at ${url} (${cause})`);
  }
  const challenge = res.headers.get("www-authenticate") ?? "";
  const realm = /^bearer\s.*realm="([^"]+)"/i.exec(challenge)?.[1];
  if (res.status !== 401 || !realm)
    throw new CommandError(
      `${host} does not take platform tokens (GET /v2/ answered ${res.status}${challenge ? ` with ${challenge.split(" ")[0]} auth` : ""}): log in with --username <user> --password-stdin`,
    );
  return realm;
}
