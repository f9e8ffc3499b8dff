/**
 * buf as the proto commands run it, and the workspace they run it in. buf is the binary that
 * `@bufbuild/buf` installs beside the CLI, never one on PATH or a download, so every machine
 * checks with the same version offline. The workspace's rules are its `buf.yaml` (which
 * `platform init` writes), so `buf lint` in an editor agrees with `platform proto lint`; the proto
 * root and language come from the workspace file (src/workspace/protos.ts reads it).
 */
import { spawn } from "node:child_process";
import { readdir, readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { isAbsolute, join, normalize, relative, sep } from "node:path";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { describeIssues } from "../contracts/issues.ts";
import { CommandError } from "../process/command-error.ts";
import type { Language } from "./languages.ts";

/** The package @bufbuild/buf installs for each platform (its own table, scripts/platform.ts). */
const BUF_PACKAGES: Record<string, string> = {
  "linux x64": "@bufbuild/buf-linux-x64",
  "linux arm64": "@bufbuild/buf-linux-aarch64",
  "darwin x64": "@bufbuild/buf-darwin-x64",
  "darwin arm64": "@bufbuild/buf-darwin-arm64",
  "win32 x64": "@bufbuild/buf-win32-x64",
  "win32 arm64": "@bufbuild/buf-win32-arm64",
};

/** The path of the buf binary installed with the CLI; a clear error where there is none. */
export function bufBinary(): string {
  const platform = `${process.platform} ${process.arch}`;
  const pkg = BUF_PACKAGES[platform];
  try {
    if (pkg)
      return createRequire(import.meta.url).resolve(`${pkg}/bin/buf${process.platform === "win32" ? ".exe" : ""}`);
  } catch {
    // Reported below with the fix.
  }
  throw new CommandError(
    `buf is not installed with the CLI for ${platform} (${pkg ?? "no @bufbuild/buf build for this platform"}): reinstall the CLI's dependencies (npm ci)`,
  );
}

export type Run = { code: number; stdout: Buffer; stderr: string };

/** Runs `program` to its end in `cwd`, its output collected (descriptor sets come on stdout). */
export function runProgram(program: string, args: string[], cwd: string): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(program, args, { cwd, stdio: ["ignore", "pipe", "pipe"] });
    const out: Buffer[] = [];
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => out.push(d));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.once("error", reject);
    child.once("close", (code) => resolve({ code: code ?? 1, stdout: Buffer.concat(out), stderr }));
  });
}

export function runBuf(args: string[], cwd: string): Promise<Run> {
  return runProgram(bufBinary(), args, cwd);
}

/** One problem in a source file: buf's lint, breaking and compile findings, and the platform's own. */
export type Finding = {
  path: string;
  line: number;
  column: number;
  end_line?: number;
  end_column?: number;
  rule: string;
  message: string;
};

export function formatFinding(f: Finding): string {
  return `${f.path}:${f.line}:${f.column}: ${f.rule}: ${f.message}`;
}

const BufFinding = z.object({
  path: z.string().default(""),
  start_line: z.number().default(0),
  start_column: z.number().default(0),
  end_line: z.number().optional(),
  end_column: z.number().optional(),
  type: z.string(),
  message: z.string(),
});

/** `buf lint|breaking|build --error-format json`: one finding a line (compile errors too, as COMPILE). */
export function parseBufFindings(stdout: string): Finding[] {
  return stdout
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => {
      const f = BufFinding.parse(JSON.parse(line));
      return {
        path: f.path,
        // A finding about a whole file has no position: its first line, as editors show it.
        line: Math.max(f.start_line, 1),
        column: Math.max(f.start_column, 1),
        ...(f.end_line ? { end_line: f.end_line } : {}),
        ...(f.end_column ? { end_column: f.end_column } : {}),
        rule: f.type,
        message: f.message,
      };
    });
}

export function sortFindings(findings: Finding[]): Finding[] {
  return findings.sort(
    (a, b) => a.path.localeCompare(b.path) || a.line - b.line || a.column - b.column || a.rule.localeCompare(b.rule),
  );
}

/** The lines buf prints when it fails for a reason other than findings (a bad buf.yaml, say). */
export function bufFailure(what: string, run: Run): CommandError {
  return new CommandError(`${what} failed: ${run.stderr.trim() || run.stdout.toString().trim() || `exit ${run.code}`}`);
}

/** What the workspace file says about the protos: src/workspace/protos.ts reads it. */
export type ProtoSettings = {
  root: string;
  /** The file `orgId`, `protoRoot` and `language` come from, as errors name it (`.platformrc.json`). */
  configFile: string;
  orgId: string | undefined;
  /** Checked to lie inside the root (`insideRoot`). */
  protoRoot: string;
  language: Language;
};

export type ProtoWorkspace = {
  root: string;
  /** The file `orgId`, `protoRoot` and `language` come from, as errors name it. */
  configFile: string;
  /** `.platformrc.json`'s `orgId`: the organization the workspace publishes to, when it names one. */
  orgId: string | undefined;
  /** `.platformrc.json`'s `protoRoot` (default `proto`), relative to the root. */
  protoRoot: string;
  /** `.platformrc.json`'s `language` (default `node`). */
  language: Language;
  /** buf.yaml's modules, relative to the root. */
  modules: string[];
  /** buf.yaml's `breaking.use`: the rule sets `buf breaking` applies (buf's default: FILE). */
  breaking: string[];
  /** Every .proto file of the modules, relative to the root with "/", sorted. */
  files: string[];
};

const BufYaml = z.object({
  version: z.literal("v2", { message: 'expected "v2" (`platform init` writes a v2 buf.yaml)' }),
  modules: z
    .array(z.object({ path: z.string() }))
    .min(1)
    .default([{ path: "." }]),
  breaking: z.object({ use: z.array(z.string()).min(1).default(["FILE"]) }).default({ use: ["FILE"] }),
});

/** A relative directory inside the workspace, as written in a config file; `what` names it in errors. */
export function insideRoot(value: string, what: string): string {
  const path = normalize(value);
  if (isAbsolute(value) || path === ".." || path.startsWith(`..${sep}`))
    throw new CommandError(`${what}: expected a directory inside the workspace, got "${value}"`, 2);
  return path.split(sep).join("/");
}

async function protoFilesUnder(root: string, dir: string): Promise<string[]> {
  const entries = await readdir(join(root, dir), { withFileTypes: true, recursive: true }).catch(
    (e: NodeJS.ErrnoException) => {
      if (e.code === "ENOENT") return [];
      throw e;
    },
  );
  return entries
    .filter((e) => e.isFile() && e.name.endsWith(".proto"))
    .map((e) => relative(root, join(e.parentPath, e.name)).split(sep).join("/"));
}

/** The workspace the proto commands work in: its settings and its `buf.yaml`, which must exist: its rules are the ones checked. */
export async function readProtoWorkspace(ws: ProtoSettings): Promise<ProtoWorkspace> {
  const { protoRoot, language, configFile } = ws;
  const file = join(ws.root, "buf.yaml");
  const raw = await readFile(file, "utf8").catch((e: NodeJS.ErrnoException) => {
    if (e.code === "ENOENT")
      throw new CommandError(
        `no buf.yaml in ${ws.root}: run \`platform init\` (it writes buf.yaml with the lint and breaking rules)`,
      );
    throw new CommandError(`${file}: cannot read it (${e.code ?? e.message})`);
  });
  let yaml: unknown;
  try {
    yaml = parseYaml(raw);
  } catch (e) {
    throw new CommandError(`${file}: not valid YAML (${(e as Error).message.split("\n")[0]})`, 2);
  }
  const parsed = BufYaml.safeParse(yaml);
  if (!parsed.success) throw new CommandError(`${file}: ${describeIssues(parsed.error)}`, 2);
  const modules = parsed.data.modules.map((m) => insideRoot(m.path, `${file}: modules.path`));
  // Two files name where the protos are; were they to differ, buf would check other files than the platform's.
  if (!modules.includes(protoRoot))
    throw new CommandError(
      `${file}: no module has path "${protoRoot}", the protoRoot of ${configFile}: add \`- path: ${protoRoot}\` under modules`,
      2,
    );
  const files = (await Promise.all(modules.map((m) => protoFilesUnder(ws.root, m)))).flat().sort();
  return {
    root: ws.root,
    configFile,
    orgId: ws.orgId,
    protoRoot,
    language,
    modules,
    breaking: parsed.data.breaking.use,
    files,
  };
}

/**
 * The workspace path of a descriptor set's file, named relative to its module (`platform/items/v1/items.proto`
 * → `proto/platform/items/v1/items.proto`), as buf's own findings name it.
 */
export function workspacePath(ws: ProtoWorkspace, name: string): string {
  for (const m of ws.modules) {
    const path = m === "." ? name : `${m}/${name}`;
    if (ws.files.includes(path)) return path;
  }
  return name;
}
