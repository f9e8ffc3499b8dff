/**
 * Plain HTTP to loopback image registries for every pull a build makes (a base image on a local
 * mirror, `127.0.0.1:5000/library/node:24-slim`). Push and login pass `--tls-verify=false` for
 * them; `build` has no such flag for its pulls, so buildah and podman get a registries.conf for the
 * build (CONTAINERS_REGISTRIES_CONF): the one they would read otherwise, with each loopback image
 * registry the build names marked `insecure = true`. Only loopback hosts, never every registry:
 * TLS stays verified for the rest. docker decides for itself (it allows loopback).
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse, stringify, type TomlTable } from "smol-toml";
import { CommandError } from "../process/command-error.ts";

/** A loopback registry host (and port) at the start of an image reference: `localhost`, 127.0.0.0/8, `[::1]`. */
const LOOPBACK_HOST = /(?<![\w.:[-])(?:localhost|127\.\d{1,3}\.\d{1,3}\.\d{1,3}|\[::1\])(?::\d{1,5})?(?=\/)/g;

/**
 * The loopback image registries a build may pull from: every one named in the Dockerfile (FROM,
 * `COPY --from`, ARG defaults) or a build argument's value. A superset is harmless: a loopback
 * registry is spoken to in plain HTTP anyway (src/container-images/session.ts, `isPlainHttp`).
 */
export function loopbackHosts(dockerfile: string, buildArgs: Record<string, string>): string[] {
  const texts = [dockerfile, ...Object.values(buildArgs)];
  return [...new Set(texts.flatMap((t) => [...t.matchAll(LOOPBACK_HOST)].map((m) => m[0])))].sort();
}

type RegistryEntry = { location?: unknown; prefix?: unknown; insecure?: unknown };

/**
 * `base` (a registries.conf as parsed) with each of `hosts` insecure: in v2's `[[registry]]` list
 * (its entry for the host marked, else one added), or in v1's `[registries.insecure]` where the
 * file is written that way (the two forms cannot be mixed).
 */
export function withInsecure(base: TomlTable, hosts: string[]): TomlTable {
  const conf: TomlTable = structuredClone(base);
  const v1 = conf.registries as TomlTable | undefined;
  if (v1 && typeof v1 === "object" && !Array.isArray(v1)) {
    const insecure = (v1.insecure ?? {}) as { registries?: unknown };
    const listed = Array.isArray(insecure.registries) ? (insecure.registries as string[]) : [];
    v1.insecure = { ...insecure, registries: [...new Set([...listed, ...hosts])] };
    return conf;
  }
  const entries = (Array.isArray(conf.registry) ? conf.registry : []) as RegistryEntry[];
  for (const host of hosts) {
    const entry = entries.find((r) => (r.prefix ?? r.location) === host);
    if (entry) entry.insecure = true;
    else entries.push({ location: host, insecure: true });
  }
  conf.registry = entries as TomlTable[];
  return conf;
}

/** The first of `files` that exists, parsed; an empty configuration where none does. */
async function readBase(files: string[]): Promise<TomlTable> {
  for (const file of files) {
    const text = await readFile(file, "utf8").catch((e: NodeJS.ErrnoException) => {
      if (e.code === "ENOENT") return undefined;
      throw new CommandError(`${file}: cannot read it (${e.code ?? e.message})`);
    });
    if (text === undefined) continue;
    try {
      return parse(text);
    } catch (e) {
      throw new CommandError(`${file}: not valid TOML (${(e as Error).message.split("\n")[0]}); mend it or unset it`);
    }
  }
  return {};
}

/**
 * Runs `build` with the environment variables a build needs to pull from `hosts` in plain HTTP:
 * none where there is no host, else CONTAINERS_REGISTRIES_CONF naming a file removed after.
 */
export async function withLoopbackRegistries<T>(
  hosts: string[],
  registriesConfFiles: string[],
  build: (env: Record<string, string>) => Promise<T>,
): Promise<T> {
  if (hosts.length === 0) return build({});
  const conf = withInsecure(await readBase(registriesConfFiles), hosts);
  const dir = await mkdtemp(join(tmpdir(), "platform-registries-"));
  try {
    const file = join(dir, "registries.conf");
    await writeFile(file, `${stringify(conf)}\n`, { mode: 0o600 });
    return await build({ CONTAINERS_REGISTRIES_CONF: file });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
