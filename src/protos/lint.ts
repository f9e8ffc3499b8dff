/**
 * `platform proto lint`: buf's lint with the workspace's buf.yaml (STANDARD, COMMENT_SERVICE,
 * COMMENT_RPC as `platform init` writes it: lower_snake_case fields, PascalCase messages, services
 * and RPCs, the directory matching the package, a comment on every service and RPC), plus the
 * platform's conventions that no buf rule states. Those are placed from the source info of the
 * descriptor set buf builds, so every finding reads `path:line:column: RULE: message`.
 */
import type { FileDescriptorProto } from "@bufbuild/protobuf/wkt";
import { decodeDescriptorSet, SOURCE_PATH, type Span, spanOf } from "./descriptors.ts";
import {
  bufFailure,
  type Finding,
  type ProtoWorkspace,
  parseBufFindings,
  runBuf,
  sortFindings,
  workspacePath,
} from "./buf.ts";

/** `platform.<domain>.v<major>`: the platform's packages, one per domain and major version. */
const PACKAGE_SHAPE = /^platform\.[a-z][a-z0-9_]*\.v[1-9][0-9]*$/;

/** The platform's own rules, beside buf's: what each checks (docs/protos.md lists them). */
export const PLATFORM_RULES = {
  PLATFORM_SYNTAX_PROTO3: "files use proto3 syntax (a missing syntax is buf's SYNTAX_SPECIFIED)",
  PLATFORM_PACKAGE_NAME:
    "packages are named platform.<domain>.v<major> (a missing package is buf's PACKAGE_DEFINED, the directory buf's PACKAGE_DIRECTORY_MATCH)",
} as const;

export type LintReport = {
  /** The workspace's .proto files, relative to its root. */
  files: string[];
  /** Sorted by path and position; none when the protos lint clean. */
  findings: Finding[];
};

const START: Span = { line: 1, column: 1, end_line: 1, end_column: 1 };

function finding(path: string, span: Span | undefined, rule: keyof typeof PLATFORM_RULES, message: string): Finding {
  return { path, ...(span ?? START), rule, message };
}

/** The platform's conventions in one file of the descriptor set (its path in the workspace: `path`). */
function conventions(path: string, file: FileDescriptorProto): Finding[] {
  const found: Finding[] = [];
  // Compilers leave `syntax` empty for proto2, written or not; buf's SYNTAX_SPECIFIED reports a
  // file without a syntax statement, so only a statement the author wrote is reported here.
  const written = spanOf(file, [SOURCE_PATH.syntax]);
  if (file.syntax === "editions" || (file.syntax !== "proto3" && written))
    found.push(
      finding(
        path,
        written ?? spanOf(file, [SOURCE_PATH.edition]),
        "PLATFORM_SYNTAX_PROTO3",
        `Files must use proto3 syntax (syntax = "proto3";), not ${file.syntax === "editions" ? "editions" : "proto2"}.`,
      ),
    );
  if (file.package !== "" && !PACKAGE_SHAPE.test(file.package))
    found.push(
      finding(
        path,
        spanOf(file, [SOURCE_PATH.package]),
        "PLATFORM_PACKAGE_NAME",
        `Package name "${file.package}" should have the form "platform.<domain>.v<major>", such as "platform.items.v1".`,
      ),
    );
  return found;
}

/**
 * Lints the workspace's protos: buf's findings (COMPILE for a file that does not compile) and
 * the platform's. A workspace without .proto files lints clean, with no files.
 */
export async function lintProtos(ws: ProtoWorkspace): Promise<LintReport> {
  if (ws.files.length === 0) return { files: [], findings: [] };
  const [lint, build] = await Promise.all([
    runBuf(["lint", "--error-format", "json"], ws.root),
    runBuf(["build", "--exclude-imports", "--error-format", "json", "-o", "-"], ws.root),
  ]);
  if (lint.code !== 0 && lint.code !== 100) throw bufFailure("buf lint", lint);
  const findings = parseBufFindings(lint.stdout.toString());
  // A descriptor set exists only when every file compiles; when one does not, buf lint said why (COMPILE).
  if (build.code === 0)
    for (const file of decodeDescriptorSet(build.stdout).file)
      findings.push(...conventions(workspacePath(ws, file.name), file));
  return { files: ws.files, findings: sortFindings(findings) };
}
