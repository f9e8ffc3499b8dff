#!/usr/bin/env node
// `npm run lock:templates [-- node|python] [--fresh] [--before <date>]`: brings the scaffold
// templates' locks in line with their manifests.
//
// - templates/service/node/common/package-lock.json: `npm install` of the template's package.json
//   over its current lock (so only what the manifest changed moves; `--fresh` resolves everything
//   anew, `--before <date>` only from versions published before it), with a fresh npm cache, so
//   the lock is what a new machine gets. An optional dependency the registry does not serve
//   fails it: `npm ci` would refuse that lock ("Missing: … from lock file").
// - templates/service/python/common/requirements.lock: `pip freeze` of a fresh Python 3.11 venv
//   with pyproject.toml's pinned dependencies and dev extras, from the machine's pip mirrors
//   (scripts/pip-index.sh).
//
// Run the scaffold tests after (test/e2e/service-node.test.ts, test/e2e/service-python.test.ts):
// a lock holds the versions they passed with. test/unit/template-locks.test.ts checks each lock
// against its manifest.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { parse } from "smol-toml";

const ROOT = join(import.meta.dirname, "../..");
const NODE = join(ROOT, "templates/service/node/common");
const PYTHON = join(ROOT, "templates/service/python/common");
/** The name the template's package.json gets for the install; `{{name}}` again in the lock. */
const STAND_IN = "scaffold-lock";

/** The template's text with its placeholders filled in well enough for npm or TOML to read it. */
const standIn = (text) => text.replaceAll("{{name}}", STAND_IN).replace(/\{\{\w+\}\}/g, "x");

/** Whether `dep`, needed by the package at `path`, has an entry where Node would look for it. */
function resolves(lock, path, dep) {
  for (let at = path; ; ) {
    if (lock.packages[`${at ? `${at}/` : ""}node_modules/${dep}`]) return true;
    if (!at) return false;
    const i = at.lastIndexOf("/node_modules/");
    at = i < 0 ? "" : at.slice(0, i);
  }
}

/** Optional dependencies the lock names but holds no entry for: `npm ci` refuses such a lock. */
function missingOptionals(lock) {
  return Object.entries(lock.packages).flatMap(([path, entry]) =>
    Object.keys(entry.optionalDependencies ?? {})
      .filter((dep) => !resolves(lock, path, dep))
      .map((dep) => `${dep} (of ${path || "the root"})`),
  );
}

function lockNode({ fresh, before }) {
  const dir = mkdtempSync(join(tmpdir(), "platform-lock-node-"));
  try {
    writeFileSync(join(dir, "package.json"), standIn(readFileSync(join(NODE, "package.json"), "utf8")));
    if (!fresh && existsSync(join(NODE, "package-lock.json")))
      writeFileSync(join(dir, "package-lock.json"), standIn(readFileSync(join(NODE, "package-lock.json"), "utf8")));
    // A fresh cache: versions as the registry serves them to a new machine, none from this one's cache.
    execFileSync(
      "npm",
      [
        "install",
        "--ignore-scripts",
        "--no-audit",
        "--no-fund",
        "--cache",
        join(dir, ".npm-cache"),
        ...(before ? ["--before", before] : []),
      ],
      { cwd: dir, stdio: "inherit" },
    );
    const lock = JSON.parse(readFileSync(join(dir, "package-lock.json"), "utf8"));
    const missing = missingOptionals(lock);
    if (missing.length > 0) {
      console.error(
        `the registry does not serve ${missing.join(", ")}: \`npm ci\` would refuse this lock. Pin the package that asks for it to an older version, or run with --before <date>; the lock is unchanged`,
      );
      process.exit(1);
    }
    lock.name = "{{name}}";
    lock.packages[""].name = "{{name}}";
    writeFileSync(join(NODE, "package-lock.json"), `${JSON.stringify(lock, null, 2)}\n`);
    console.log(`wrote ${join(NODE, "package-lock.json")} (${Object.keys(lock.packages).length - 1} packages)`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function lockPython() {
  const pyproject = parse(standIn(readFileSync(join(PYTHON, "pyproject.toml"), "utf8")));
  const wanted = [...pyproject.project.dependencies, ...(pyproject.project["optional-dependencies"]?.dev ?? [])];
  const dir = mkdtempSync(join(tmpdir(), "platform-lock-python-"));
  try {
    execFileSync(process.env.PYTHON ?? "python3.11", ["-m", "venv", join(dir, "venv")], { stdio: "inherit" });
    const pip = join(dir, "venv/bin/pip");
    // pip-index.sh's `index` array, one argument a line.
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a bash expansion, not a JS template
    const index = execFileSync("bash", ["-c", 'source scripts/pip-index.sh; printf "%s\\n" "${index[@]}"'], {
      cwd: ROOT,
      encoding: "utf8",
    })
      .split("\n")
      .filter(Boolean);
    execFileSync(pip, ["install", "-q", "--disable-pip-version-check", ...index, ...wanted], { stdio: "inherit" });
    const frozen = execFileSync(pip, ["freeze", "--all", "--disable-pip-version-check"], { encoding: "utf8" })
      .split("\n")
      .filter((line) => line && !line.startsWith("pip=="));
    const header = readFileSync(join(PYTHON, "requirements.lock"), "utf8")
      .split("\n")
      .filter((line) => line.startsWith("#"));
    writeFileSync(join(PYTHON, "requirements.lock"), `${[...header, ...frozen].join("\n")}\n`);
    console.log(`wrote ${join(PYTHON, "requirements.lock")} (${frozen.length} packages)`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { fresh: { type: "boolean", default: false }, before: { type: "string" } },
});
const which = positionals[0];
if (positionals.length > 1 || (which !== undefined && which !== "node" && which !== "python")) {
  console.error("usage: npm run lock:templates -- [node|python] [--fresh] [--before <date>]");
  process.exit(2);
}
if (which !== "python") lockNode(values);
if (which !== "node") lockPython();
