/** `platform training submit|list`: the model registry. */
import { createReadStream, existsSync, statSync } from "node:fs";
import { resolve } from "node:path";
import { Transform } from "node:stream";
import type { Command } from "commander";
import type { ModelVersionRecord } from "../contracts/records.ts";
import { ApiClient } from "./client.ts";
import { CliError } from "./errors.ts";
import { formatBytes, formatCount, printJson, printTable } from "./output.ts";
import { progressReporter } from "./progress.ts";
import { SOURCE_SCHEMES } from "../registry/sources.ts";

export function registerTraining(program: Command): void {
  const training = program.command("training").description("register models and list the registry");

  training
    .command("submit")
    .description("register a new version of a model from a source location")
    .requiredOption("--name <name>", "model name")
    .option("--framework <framework>", "serving framework: llamacpp or vllm", "llamacpp")
    .requiredOption("--source <source>", "local path, file://, https://, hf://org/repo/file.gguf or s3://bucket/key")
    .option("--version <version>", "explicit version (default: the next v1, v2, ...)")
    .option("--json", "print the record as JSON")
    .action(async (opts: { name: string; framework: string; source: string; version?: string; json?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const local = localFile(opts.source);
      let record: ModelVersionRecord;
      if (local) {
        // Uploading makes a local file work against a remote gateway too.
        const size = statSync(local).size;
        const progress = progressReporter("uploading");
        let sent = 0;
        const counter = new Transform({
          transform(chunk: Buffer, _enc, done) {
            sent += chunk.length;
            progress.update(sent, size);
            done(null, chunk);
          },
        });
        const query = new URLSearchParams({ framework: opts.framework, source: opts.source, ...(opts.version ? { version: opts.version } : {}) });
        try {
          record = await api.request("POST", `/admin/v1/models/${encodeURIComponent(opts.name)}/upload?${query}`, undefined, createReadStream(local).pipe(counter));
        } finally {
          progress.done();
        }
      } else {
        // The server downloads a remote source; it streams its progress back.
        const progress = progressReporter("downloading");
        const body = { name: opts.name, framework: opts.framework, source: opts.source, version: opts.version };
        try {
          record = await api.requestWithProgress("POST", "/admin/v1/models?progress=ndjson", body, (p) => progress.update(p.received, p.total));
        } finally {
          progress.done();
        }
      }
      if (opts.json) return printJson(record);
      console.log(`registered ${record.name}@${record.version} (${formatBytes(record.size_bytes)}, sha256 ${record.sha256.slice(0, 12)}…)`);
      if (record.gguf) {
        const g = record.gguf;
        console.log(`  ${g.architecture ?? "?"} · ${formatCount(g.parameters)} parameters · context ${g.context_length ?? "?"} · ${g.quantization ?? "?"}${g.chat_template ? " · chat template" : ""}`);
      }
    });

  training
    .command("list")
    .description("list registered models and their versions")
    .option("--json", "print JSON")
    .action(async (opts: { json?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const { data } = await api.request<{ data: ModelVersionRecord[] }>("GET", "/admin/v1/models");
      if (opts.json) return printJson(data);
      if (data.length === 0) return console.log("no models registered yet: `platform training submit --name <name> --source <path>`");
      printTable(
        ["NAME", "VERSION", "FRAMEWORK", "ARCH", "PARAMS", "CONTEXT", "QUANT", "SIZE", "CREATED"],
        data.map((m) => [
          m.name,
          m.version,
          m.framework,
          m.gguf?.architecture ?? "-",
          formatCount(m.gguf?.parameters ?? null),
          m.gguf?.context_length ?? "-",
          m.gguf?.quantization ?? "-",
          formatBytes(m.size_bytes),
          new Date(m.created).toISOString().replace("T", " ").slice(0, 19),
        ]),
      );
    });
}

/** A source that names a file on this machine (plain path or file://), resolved; else undefined. */
function localFile(source: string): string | undefined {
  if (/^(https?|hf|s3):\/\//i.test(source)) return undefined;
  const scheme = /^([a-z][a-z0-9+.-]+):/i.exec(source)?.[1]?.toLowerCase();
  if (scheme !== undefined && scheme !== "file") throw new CliError(`--source ${source}: the "${scheme}:" scheme is not supported; use ${SOURCE_SCHEMES}`, 2);
  const path = source.startsWith("file://") ? new URL(source).pathname : resolve(source);
  if (!existsSync(path)) throw new CliError(`--source ${source}: no such file`, 2);
  return path;
}
