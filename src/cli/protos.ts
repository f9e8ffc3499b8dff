/**
 * `platform proto lint|generate|publish|list|versions|fetch`: the team's API contracts, checked with
 * buf and the platform's conventions, turned into stubs, and kept in the platform's proto catalog per
 * organization, package and version (docs/protos.md).
 */
import type { Command } from "commander";
import { formatBytes } from "../contracts/bytes.ts";
import { ProtoPackageName, ProtoVersionName } from "../protos/names.ts";
import { formatFinding } from "../protos/buf.ts";
import { ApiClient } from "../client/api.ts";
import { CliError } from "./common/errors.ts";
import { printJson, printTable } from "./common/output.ts";
import { generate } from "../protos/generate.ts";
import { LANGUAGES } from "../protos/languages.ts";
import { lintProtos } from "../protos/lint.ts";
import { fetchVersion, publishedPackages, publishedVersions, publish } from "../protos/catalog.ts";
import { protoWorkspace } from "../workspace/protos.ts";

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;
const time = (seconds: number) => new Date(seconds * 1000).toISOString().replace(/\.\d+Z$/, "Z");

export function registerProtos(program: Command): void {
  const proto = program
    .command("proto")
    .description("API contracts: lint .proto files, generate stubs, publish them to the platform's proto catalog");

  proto
    .command("lint")
    .description("check the workspace's protos with buf (buf.yaml's rules) and the platform's conventions")
    .option("--format <format>", "text (path:line:column: RULE: message) or json", "text")
    .action(async (opts: { format: string }) => {
      if (opts.format !== "text" && opts.format !== "json") throw new CliError("--format: expected text or json", 2);
      const ws = await protoWorkspace();
      const { files, findings } = await lintProtos(ws);
      if (findings.length > 0) process.exitCode = 1;
      if (opts.format === "json") return printJson({ files, findings });
      for (const f of findings) console.log(formatFinding(f));
      const where = ws.modules.map((m) => `${m}/`).join(", ");
      if (findings.length > 0)
        console.error(
          `${plural(findings.length, "finding")} in ${plural(new Set(findings.map((f) => f.path)).size, "file")} of ${where}`,
        );
      else if (files.length === 0) console.log(`no .proto files in ${where}: nothing to lint`);
      else console.log(`${plural(files.length, "file")} in ${where} lint clean (buf.yaml's rules and the platform's)`);
    });

  proto
    .command("generate")
    .description("write stubs into src/__generated__/ (node: protoc-gen-es; python: grpcio-tools)")
    .option("--lang <lang>", "node or python (default: the workspace's language)")
    .option("--python <path>", "the Python with grpcio-tools (default: the workspace's .venv, else python3)")
    .action(async (opts: { lang?: string; python?: string }) => {
      const lang = LANGUAGES.find((l) => l === opts.lang);
      if (opts.lang !== undefined && !lang) throw new CliError(`--lang: expected ${LANGUAGES.join(" or ")}`, 2);
      const ws = await protoWorkspace();
      const r = await generate(ws, lang ?? ws.language, { python: opts.python });
      for (const path of r.written) console.log(`wrote    ${r.dir}/${path}`);
      for (const path of r.removed) console.log(`removed  ${r.dir}/${path}`);
      console.log(
        `${r.language} stubs in ${r.dir}/ (${r.generator}): ${r.written.length} written, ${r.unchanged.length} unchanged, ${r.removed.length} removed`,
      );
    });

  proto
    .command("publish")
    .description(
      "publish the workspace's packages to the proto catalog (refused if a change breaks the previous version)",
    )
    .option(
      "--version <X.Y.Z>",
      "the version (default: 1.0.0 first, then the next minor; the next major with --allow-breaking)",
    )
    .option("--allow-breaking", "publish even if buf breaking finds changes that break the previous version")
    .option("--json", "print JSON")
    .action(async (opts: { version?: string; allowBreaking?: boolean; json?: boolean }) => {
      if (opts.version !== undefined && !ProtoVersionName.safeParse(opts.version).success)
        throw new CliError(`--version: expected X.Y.Z, such as 1.2.0 (got "${opts.version}")`, 2);
      const ws = await protoWorkspace();
      const api = await ApiClient.fromCredentials();
      const outcomes = await publish(ws, api, { version: opts.version, allowBreaking: opts.allowBreaking ?? false });
      if (opts.json) return printJson(outcomes);
      for (const o of outcomes) {
        if (o.status === "unchanged") console.log(`${o.package}@${o.version}: unchanged, nothing published`);
        else
          console.log(
            `published ${o.package}@${o.version}${o.previous ? ` (after ${o.previous}` : " (first version"}${o.breaking.length > 0 ? `; ${plural(o.breaking.length, "breaking change")} allowed` : ""}) to ${api.baseUrl}`,
          );
      }
    });

  proto
    .command("list")
    .description("your organization's proto packages")
    .option("--json", "print JSON")
    .action(async (opts: { json?: boolean }) => {
      const packages = await publishedPackages(await ApiClient.fromCredentials());
      if (opts.json) return printJson(packages);
      printTable(
        ["PACKAGE", "LATEST", "VERSIONS", "UPDATED"],
        packages.map((p) => [p.package, p.latest, p.versions, time(p.updated)]),
      );
    });

  proto
    .command("versions <package>")
    .description("a package's versions, the highest first")
    .option("--json", "print JSON")
    .action(async (pkg: string, opts: { json?: boolean }) => {
      const name = ProtoPackageName.safeParse(pkg);
      if (!name.success) throw new CliError(`<package>: ${name.error.issues[0]?.message}`, 2);
      const versions = await publishedVersions(await ApiClient.fromCredentials(), pkg);
      if (opts.json) return printJson(versions);
      printTable(
        ["VERSION", "PUBLISHED", "BY", "FILES", "IMAGE", "SERVICES", "BREAKING"],
        versions.map((v) => [
          v.version,
          time(v.created),
          v.published_by.name,
          v.files.length,
          formatBytes(v.image.size),
          v.service_names.join(", ") || "-",
          v.allow_breaking ? "allowed" : "-",
        ]),
      );
    });

  proto
    .command("fetch <package[@version]>")
    .description("write a version's sources and image (<package>-<version>.binpb) into --out")
    .requiredOption("--out <dir>", "the directory to write into (nothing is written outside it)")
    .action(async (spec: string, opts: { out: string }) => {
      const { written } = await fetchVersion(await ApiClient.fromCredentials(), spec, opts.out);
      for (const path of written) console.log(`wrote ${path}`);
    });
}
