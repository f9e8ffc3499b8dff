/**
 * An organization's image-pull credentials (docs/services.md, "Pulling from a private registry"):
 * one Redis hash per organization, registry host → username, the password sealed as services'
 * secrets are (AES-256-GCM under PLATFORM_SECRETS_KEY, src/services/secrets.ts) with the
 * organization and host as additional data, who set it and when. Everything is addressed within
 * one organization, so another's are not found, not refused. Only the scaler opens a password,
 * to pull that organization's images; listings never hold one.
 */
import { z } from "zod";
import { PlatformError } from "../contracts/errors.ts";
import type { Control } from "../redis/connection.ts";
import { LuaScript } from "../redis/scripts.ts";
import { parseStored } from "../redis/stored.ts";
import type { SecretBox } from "../services/secrets.ts";
import { MAX_HOSTS_PER_ORG } from "./names.ts";

const setScript = new LuaScript(import.meta.url, "set");

const Entry = z.object({
  username: z.string(),
  /** The password, sealed (SecretBox). */
  sealed: z.string(),
  updated: z.number().int(),
  by: z.object({ id: z.string(), name: z.string() }),
});
type Entry = z.infer<typeof Entry>;

/** What the API shows of one: never the password. */
export type RegistryCredentialInfo = {
  host: string;
  username: string;
  /** Epoch seconds. */
  updated: number;
  by: { id: string; name: string };
};

/** The additional data a password is sealed with: moved to another organization or host, it does not open. */
const context = (org: string, host: string) => `pull:${org}/${host}`;

export class RegistryCredentials {
  private readonly ctl: Control;
  private readonly box: () => Promise<SecretBox>;

  constructor(ctl: Control, box: () => Promise<SecretBox>) {
    this.ctl = ctl;
    this.box = box;
  }

  /** Sets (or replaces) the credential for `host`; 409 past MAX_HOSTS_PER_ORG hosts. */
  async set(
    org: string,
    host: string,
    username: string,
    password: string,
    by: { id: string; name: string },
  ): Promise<{ info: RegistryCredentialInfo; replaced: boolean }> {
    const entry: Entry = {
      username,
      sealed: (await this.box()).seal(password, context(org, host)),
      updated: Math.floor(Date.now() / 1000),
      by,
    };
    const outcome = await setScript.run(
      this.ctl.redis,
      [this.ctl.keys.registryCredentials(org)],
      [host, JSON.stringify(entry), MAX_HOSTS_PER_ORG],
    );
    if (outcome === "too_many")
      throw new PlatformError(
        409,
        "registry_credential_limit_reached",
        `an organization holds pull credentials for at most ${MAX_HOSTS_PER_ORG} registries; remove one first (platform registry credentials remove <host>)`,
      );
    return { info: infoOf(host, entry), replaced: outcome === "replaced" };
  }

  async list(org: string): Promise<RegistryCredentialInfo[]> {
    return [...(await this.entries(org)).entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([host, e]) => infoOf(host, e));
  }

  /** True when there was one to remove. */
  async remove(org: string, host: string): Promise<boolean> {
    return (await this.ctl.redis.hdel(this.ctl.keys.registryCredentials(org), host)) === 1;
  }

  /** The credential for `host`, opened: for the scaler's pulls only. */
  async open(org: string, host: string): Promise<{ username: string; password: string } | undefined> {
    const key = this.ctl.keys.registryCredentials(org);
    const raw = await this.ctl.redis.hget(key, host);
    if (raw === null) return undefined;
    const parsed = parseStored(Entry, raw, "pull_credential", `${key}/${host}`);
    if (!parsed.ok) return undefined;
    const password = (await this.box()).open(parsed.value.sealed, context(org, host));
    return { username: parsed.value.username, password };
  }

  private async entries(org: string): Promise<Map<string, Entry>> {
    const key = this.ctl.keys.registryCredentials(org);
    const out = new Map<string, Entry>();
    for (const [host, raw] of Object.entries(await this.ctl.redis.hgetall(key))) {
      const parsed = parseStored(Entry, raw, "pull_credential", `${key}/${host}`);
      if (parsed.ok) out.set(host, parsed.value);
    }
    return out;
  }
}

const infoOf = (host: string, e: Entry): RegistryCredentialInfo => ({
  host,
  username: e.username,
  updated: e.updated,
  by: e.by,
});
