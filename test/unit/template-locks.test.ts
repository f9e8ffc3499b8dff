/**
 * The scaffold templates' locks match their manifests (issue: a scaffold installs what it was
 * tested with): the Node template's package-lock.json has the package.json's dependencies and
 * ranges in its root entry, and an entry for each; the Python template's requirements.lock pins
 * every package, and each of pyproject.toml's pins at the same version. `npm run lock:templates`
 * makes them agree again after a manifest changes.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parse } from "smol-toml";
import { describe, expect, it } from "vitest";

const TEMPLATES = join(import.meta.dirname, "../../templates/service");
const read = (path: string) => readFileSync(join(TEMPLATES, path), "utf8");
/** The template's text with placeholders standing in, so that JSON and TOML readers take it. */
const standIn = (text: string) => text.replace(/\{\{\w+\}\}/g, "x");

const SECTIONS = ["dependencies", "devDependencies", "optionalDependencies", "peerDependencies"] as const;
type Manifest = Partial<Record<(typeof SECTIONS)[number], Record<string, string>>> & { name?: string };
type Entry = Manifest & { version?: string; peerDependenciesMeta?: Record<string, { optional?: boolean }> };
type Lock = { name?: string; lockfileVersion?: number; packages: Record<string, Entry> };

/** What differs between a package.json and its lock, one line each; empty when they agree. */
function nodeMismatches(manifest: Manifest, lock: Lock): string[] {
  const root = lock.packages[""];
  if (!root) return ['the lock has no root entry (packages[""])'];
  const wrong: string[] = [];
  for (const section of SECTIONS) {
    const want = manifest[section] ?? {};
    const have = root[section] ?? {};
    for (const [name, range] of Object.entries(want)) {
      if (have[name] !== range) wrong.push(`${section}.${name}: package.json ${range}, lock ${have[name] ?? "absent"}`);
      else if (!lock.packages[`node_modules/${name}`]?.version) wrong.push(`${name}: no node_modules/${name} entry`);
    }
    for (const name of Object.keys(have))
      if (!(name in want)) wrong.push(`${section}.${name}: in the lock, not in package.json`);
  }
  return wrong;
}

/** Whether `dep`, needed by the package at `path`, has an entry where Node would look for it. */
function resolves(lock: Lock, path: string, dep: string): boolean {
  for (let at = path; ; ) {
    if (lock.packages[`${at ? `${at}/` : ""}node_modules/${dep}`]) return true;
    if (!at) return false;
    const i = at.lastIndexOf("/node_modules/");
    at = i < 0 ? "" : at.slice(0, i);
  }
}

/**
 * Dependencies (optional ones and required peers included) that an entry names and the lock has no
 * entry for: `npm ci` refuses such a lock ("Missing: … from lock file"). A registry that does not
 * serve a package's platform-specific optional dependency leaves one (lock-templates.mjs refuses to
 * write it).
 */
function unlocked(lock: Lock): string[] {
  return Object.entries(lock.packages).flatMap(([path, entry]) =>
    [
      ...Object.keys({ ...entry.dependencies, ...entry.optionalDependencies }),
      ...Object.keys(entry.peerDependencies ?? {}).filter((peer) => !entry.peerDependenciesMeta?.[peer]?.optional),
    ]
      .filter((dep) => !resolves(lock, path, dep))
      .map((dep) => `${dep} (of ${path || "the root"})`),
  );
}

/** A distribution's name as pip compares them (PEP 503). */
const normalize = (name: string) => name.toLowerCase().replace(/[-_.]+/g, "-");

/** What differs between pyproject.toml's pins and requirements.lock, one line each. */
function pythonMismatches(pyproject: string, lock: string): string[] {
  const project = parse(standIn(pyproject)).project as {
    dependencies?: string[];
    "optional-dependencies"?: Record<string, string[]>;
  };
  const wanted = [...(project.dependencies ?? []), ...Object.values(project["optional-dependencies"] ?? {}).flat()];
  const pinned = new Map<string, string>();
  const wrong: string[] = [];
  for (const line of lock.split("\n").filter((l) => l.trim() && !l.startsWith("#"))) {
    const m = /^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$/.exec(line.trim());
    if (m) pinned.set(normalize(m[1] as string), m[2] as string);
    else wrong.push(`requirements.lock: "${line}" is not name==version`);
  }
  for (const requirement of wanted) {
    const m = /^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*(\S+)$/.exec(requirement);
    if (!m) {
      wrong.push(`pyproject.toml: "${requirement}" is not pinned (name==version)`);
      continue;
    }
    const have = pinned.get(normalize(m[1] as string));
    if (have !== m[2]) wrong.push(`${m[1]}: pyproject.toml ${m[2]}, requirements.lock ${have ?? "absent"}`);
  }
  return wrong;
}

describe("the Node template's package-lock.json", () => {
  const manifest = JSON.parse(standIn(read("node/common/package.json"))) as Manifest;
  const lock = JSON.parse(read("node/common/package-lock.json")) as Lock;

  it("has package.json's dependencies and ranges in its root entry, and an entry for each", () => {
    expect(nodeMismatches(manifest, lock)).toEqual([]);
    expect(lock.lockfileVersion).toBe(3);
    // Rendered with the service's name, as package.json is.
    expect([lock.name, lock.packages[""]?.name]).toEqual(["{{name}}", "{{name}}"]);
  });

  it("has an entry for every dependency its entries name, optional ones included, as `npm ci` wants", () => {
    expect(unlocked(lock)).toEqual([]);
  });

  it("the check fails on an optional dependency the lock has no entry for", () => {
    // As vite 8.4.0 locked from a registry that does not serve its Windows-only optional dependency.
    const vite = lock.packages["node_modules/vite"];
    const gap: Lock = {
      ...lock,
      packages: {
        ...lock.packages,
        "node_modules/vite": {
          ...vite,
          optionalDependencies: { ...vite?.optionalDependencies, "napi-win-x": "^0.1.0" },
        },
      },
    };
    expect(unlocked(gap)).toEqual(["napi-win-x (of node_modules/vite)"]);
  });

  it("the check fails on a changed range, an added and a removed dependency", () => {
    const changed: Manifest = {
      ...manifest,
      dependencies: { ...manifest.dependencies, pino: "^9.0.0", "left-pad": "^1.3.0" },
      devDependencies: Object.fromEntries(Object.entries(manifest.devDependencies ?? {}).slice(1)),
    };
    const removed = Object.keys(manifest.devDependencies ?? {})[0];
    expect(nodeMismatches(changed, lock)).toEqual([
      `dependencies.pino: package.json ^9.0.0, lock ${manifest.dependencies?.pino}`,
      "dependencies.left-pad: package.json ^1.3.0, lock absent",
      `devDependencies.${removed}: in the lock, not in package.json`,
    ]);
  });
});

describe("the Python template's requirements.lock", () => {
  const pyproject = read("python/common/pyproject.toml");
  const lock = read("python/common/requirements.lock");

  it("pins every package, each of pyproject.toml's at its version", () => {
    expect(pythonMismatches(pyproject, lock)).toEqual([]);
  });

  it("the check fails on a version that moved, and on a range", () => {
    const moved = pyproject.replace('"grpcio==1.84.0"', '"grpcio==1.85.0"').replace('"pytest==9.1.1"', '"pytest>=9"');
    expect(pythonMismatches(moved, lock)).toEqual([
      "grpcio: pyproject.toml 1.85.0, requirements.lock 1.84.0",
      'pyproject.toml: "pytest>=9" is not pinned (name==version)',
    ]);
  });
});
