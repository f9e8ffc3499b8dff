/**
 * Which credential pulls an organization's image (docs/services.md, "Pulling from a private
 * registry"), first that applies:
 *
 * 1. the organization's own credential for the repository's host (`platform registry credentials set`);
 * 2. the platform's token server: where the registry's challenge names a realm at
 *    `/auth/registry-token` and this platform holds PLATFORM_REGISTRY_TOKEN_KEY, a pull grant for
 *    that one repository, minted here (grant.ts), when the repository is under `<org>/`;
 * 3. the operator's PLATFORM_IMAGE_PULL_AUTH_FILE, for the repositories it serves that
 *    organization (PLATFORM_IMAGE_PULL_AUTH_SCOPE; by default the organization's own `<host>/<org>/...`);
 * 4. none (a public image, or a pull that fails with the command that fixes it).
 *
 * A registry the operator does not let tenants name (src/container-images/registries.ts) is refused before
 * any of these, and the probe of step 2 reaches a registry only through the guarded resolver.
 */
import type { KeyObject } from "node:crypto";
import { readFile } from "node:fs/promises";
import {
  checkRegistryHost,
  refusedRegistry,
  registryAddresses,
  registryHostOf as hostOf,
} from "../container-images/registries.ts";
import { probe } from "../outbound/guard.ts";
import type { RegistryPolicy } from "../settings/registries.ts";
import { GRANT_USERNAME, mintPullGrant } from "./grant.ts";
import { isLoopbackHost } from "./names.ts";
import type { RegistryCredentials } from "./store.ts";

export type PullSource = "organization" | "token_server" | "operator" | "none";

export type PullAuth =
  | { source: "organization" | "token_server"; host: string; username: string; password: string }
  | { source: "operator"; authFile: string }
  | { source: "none" };

export type PullAuthOptions = {
  credentials: RegistryCredentials;
  /** PLATFORM_REGISTRY_TOKEN_KEY, loaded (grant.ts `loadTokenKey`); without it no grants. */
  tokenKey?: KeyObject;
  issuer: string;
  /** PLATFORM_IMAGE_PULL_AUTH_FILE. */
  operatorFile?: string;
  /** Which registries may be named and reached, and which repositories the operator's file serves. */
  registries: RegistryPolicy;
  /** How long a registry's challenge is remembered. */
  probeCacheMs?: number;
};

/** The command an organization's admin runs when a pull from `host` is refused. */
export const fixPullCommand = (host: string) =>
  `platform registry credentials set ${host} --username <user> --password-stdin`;

/** The realm a registry that trusts the platform names in its challenge ends so (docs/publish.md). */
const TOKEN_REALM = /\/auth\/registry-token\/?$/;

export class PullAuthResolver {
  private readonly options: PullAuthOptions;
  private readonly probes = new Map<string, { at: number; trusts: Promise<boolean> }>();

  constructor(options: PullAuthOptions) {
    this.options = options;
  }

  /** The credential to pull `repository` for `org` with; a grant lives `grantTtlMs`. */
  async resolve(org: string, repository: string, grantTtlMs = 30 * 60_000): Promise<PullAuth> {
    const host = hostOf(repository);
    checkRegistryHost(host, this.options.registries);
    const own = await this.options.credentials.open(org, host);
    if (own) return { source: "organization", host, ...own };
    const path = repository.slice(repository.indexOf("/") + 1);
    const key = this.options.tokenKey;
    if (key && path.startsWith(`${org}/`) && (await this.trustsPlatform(host))) {
      const grant = mintPullGrant({ key, issuer: this.options.issuer, org, repositories: [path], ttlMs: grantTtlMs });
      return { source: "token_server", host, username: GRANT_USERNAME, password: grant.token };
    }
    if (this.options.operatorFile && operatorServes(org, repository, this.options.registries))
      return { source: "operator", authFile: this.options.operatorFile };
    return { source: "none" };
  }

  /** Which source would serve `repository` for `org` (doctor's question): the operator file only where it names the host. */
  async sourceFor(org: string, repository: string): Promise<PullSource> {
    const host = hostOf(repository);
    checkRegistryHost(host, this.options.registries);
    if ((await this.options.credentials.list(org)).some((c) => c.host === host)) return "organization";
    const path = repository.slice(repository.indexOf("/") + 1);
    if (this.options.tokenKey && path.startsWith(`${org}/`) && (await this.trustsPlatform(host))) return "token_server";
    if (
      this.options.operatorFile &&
      operatorServes(org, repository, this.options.registries) &&
      (await operatorFileNames(this.options.operatorFile, host))
    )
      return "operator";
    return "none";
  }

  /** Whether `host`'s `GET /v2/` challenges with a Bearer realm at a platform token server. */
  trustsPlatform(host: string): Promise<boolean> {
    const now = Date.now();
    const cached = this.probes.get(host);
    if (cached && now - cached.at < (this.options.probeCacheMs ?? 60_000)) return cached.trusts;
    const trusts = challengeRealm(host, this.options.registries).then(
      (realm) => realm !== undefined && TOKEN_REALM.test(new URL(realm).pathname),
      () => false,
    );
    this.probes.set(host, { at: now, trusts });
    if (this.probes.size > 1000) this.probes.delete(this.probes.keys().next().value as string);
    return trusts;
  }
}

/**
 * The realm of `host`'s Bearer challenge on `GET /v2/` (plain HTTP for a loopback registry only):
 * one request through the guarded resolver, at an address the registry policy allows, no
 * redirect followed (a registry answers this call itself), nothing of the answer shown to anyone.
 */
async function challengeRealm(host: string, registries: RegistryPolicy): Promise<string | undefined> {
  const scheme = isLoopbackHost(host) ? "http" : "https";
  const answer = await probe(new URL(`${scheme}://${host}/v2/`), {
    policy: registryAddresses(host, registries),
    refuse: refusedRegistry(host),
    timeoutMs: 5_000,
  });
  if (answer.status !== 401) return undefined;
  const challenge = String(answer.headers["www-authenticate"] ?? "");
  return /^Bearer\s.*\brealm="([^"]+)"/i.exec(challenge)?.[1];
}

/**
 * Whether the operator's pull credential may pull `repository` for `org`: a prefix the operator
 * lists for it in PLATFORM_IMAGE_PULL_AUTH_SCOPE, else (unset) the organization's own namespace
 * `<host>/<org>/...`, the one rule pull grants follow too.
 */
export function operatorServes(org: string, repository: string, registries: RegistryPolicy): boolean {
  const path = repository.slice(repository.indexOf("/") + 1);
  const named = `${hostOf(repository)}/${path}`;
  const scopes = registries.operatorScopes;
  if (scopes === undefined) return path.startsWith(`${org}/`);
  return (scopes.get(org) ?? []).some((prefix) => named === prefix || named.startsWith(`${prefix}/`));
}

/** Whether a containers auth.json has an entry for `host` (keys may be URLs, as docker writes them). */
async function operatorFileNames(file: string, host: string): Promise<boolean> {
  try {
    const auth = JSON.parse(await readFile(file, "utf8")) as { auths?: Record<string, unknown> };
    return Object.keys(auth.auths ?? {}).some(
      (k) =>
        k
          .replace(/^https?:\/\//, "")
          .replace(/\/.*$/, "")
          .toLowerCase() === host,
    );
  } catch {
    return false;
  }
}
