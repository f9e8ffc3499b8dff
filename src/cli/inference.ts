/** `platform inference deploy|status`: endpoints (and their autoscale, abtest, batch and benchmark subcommands). */
import { readFile } from "node:fs/promises";
import type { Command } from "commander";
import { parse as parseYaml } from "yaml";
import { DeploymentConfig, type DeploymentConfigInput } from "../contracts/deployment.ts";
import { describeIssues } from "../contracts/issues.ts";
import type { Endpoint, EndpointStatus } from "../endpoints/record.ts";
import { registerAbtest } from "./abtest.ts";
import { registerAutoscale } from "./autoscale.ts";
import { registerBatch } from "./batch.ts";
import { registerBenchmark } from "./benchmark.ts";
import { ApiClient } from "../client/api.ts";
import { CliError } from "./common/errors.ts";
import { wholeNumber } from "./common/flags.ts";
import { printJson, printTable } from "./common/output.ts";

type DeployFlags = {
  config?: string;
  model?: string;
  version?: string;
  replicas?: number;
  gpuType?: string;
  quantization?: string;
  speculativeModel?: string;
  numSpeculativeTokens?: number;
  json?: boolean;
};

export function registerInference(program: Command): void {
  const inference = program.command("inference").description("deploy models as endpoints and inspect them");
  registerAutoscale(inference);
  registerAbtest(inference);
  registerBatch(inference);
  registerBenchmark(inference);

  inference
    .command("deploy")
    .description("deploy a registered model as an endpoint (flags, or a YAML file with --config)")
    .option("--config <file>", "deployment YAML (endpoint, model.*, runtime.*, resources.*)")
    .option("--model <name>", "registered model name")
    .option("--version <version>", "model version or latest", undefined)
    .option("--replicas <n>", "initial replica count", wholeNumber(0))
    .option("--gpu-type <type>", "GPU/instance type")
    .option("--quantization <int8|int4>", "llama.cpp: Q8_0 / Q4_0 made by the platform; vLLM: fp8 / bitsandbytes")
    .option("--speculative-model <name>", "draft model for speculative decoding")
    .option("--num-speculative-tokens <n>", "tokens proposed per speculative step", wholeNumber(0))
    .option("--json", "print the endpoint record as JSON")
    .action(async (flags: DeployFlags) => {
      const config = await buildConfig(flags);
      const api = await ApiClient.fromCredentials();
      const name = config.endpoint ?? config.model.name;
      const record = await api.request<Endpoint>("PUT", `/admin/v1/endpoints/${encodeURIComponent(name)}`, config);
      if (flags.json) return printJson(record);
      console.log(
        `deployed ${record.name}: ${record.config.model.name}@${record.version}, ${record.desired_replicas} replica(s) wanted`,
      );
      if (record.rollout) {
        console.log(
          `rolling out: its replicas start beside those of ${record.config.model.name}@${record.rollout.from.version}, which serve until they are ready`,
        );
      }
      console.log(`watch it come up with \`platform inference status ${record.name}\``);
    });

  inference
    .command("status <model>")
    .description("endpoint state, replicas, queue depth and version")
    .option("--json", "print JSON")
    .action(async (model: string, opts: { json?: boolean }) => {
      const api = await ApiClient.fromCredentials();
      const s = await api.request<EndpointStatus & { base_url: string }>(
        "GET",
        `/admin/v1/endpoints/${encodeURIComponent(model)}`,
      );
      if (opts.json) return printJson(s);
      printTable(
        ["ENDPOINT", "STATE", "MODEL", "VERSION", "READY/DESIRED", "QUEUE (waiting/active)"],
        [
          [
            s.endpoint,
            s.state,
            s.model,
            s.version === s.requested_version ? s.version : `${s.version} (${s.requested_version})`,
            `${s.replicas.ready}/${s.replicas.desired}`,
            `${s.queue.waiting}/${s.queue.active}`,
          ],
        ],
      );
      console.log(`base URL: ${s.base_url}`);
      if (s.replicas.starting + s.replicas.draining + s.replicas.failed > 0) {
        console.log(
          `replicas starting ${s.replicas.starting}, draining ${s.replicas.draining}, failed ${s.replicas.failed}`,
        );
      }
      if (s.not_applied.length > 0)
        console.log(`stored but not applied by ${s.framework} here: ${s.not_applied.join(", ")}`);
      for (const w of s.weights ?? []) console.log(`weights: ${w}`);
      if ((s.adapters ?? []).length > 0) console.log(`adapters loaded: ${s.adapters.join(", ")}`);
      for (const e of s.errors) console.log(`error: ${e}`);
      const r = s.rollout;
      if (r) {
        const from = `${s.model}@${r.from.version} (revision ${r.from.revision})`;
        console.log(
          `updating: ${from} → ${s.model}@${r.to.version} (revision ${r.to.revision}), ${r.ready}/${s.replicas.desired} ready; ${from} serves meanwhile`,
        );
        if (r.failed)
          console.log(
            `update failed: ${r.failed}\n  the previous deployment keeps serving; deploy again with a fix, or with its settings to undo the update`,
          );
      }
      for (const d of s.draining_revisions ?? [])
        console.log(`draining: revision ${d.revision} (${s.model}@${d.version}) finishes what ${d.queue} holds`);
      if (s.replica_list.length > 0) {
        printTable(
          ["REPLICA", "STATE", "VERSION", "REVISION", "QUEUE", "IN FLIGHT"],
          s.replica_list.map((x) => [x.id, x.state, x.version, x.revision ?? "-", x.queue ?? "-", String(x.in_flight)]),
        );
      }
    });
}

async function buildConfig(flags: DeployFlags): Promise<DeploymentConfig> {
  let doc: Record<string, unknown> = {};
  if (flags.config) {
    let text: string;
    try {
      text = await readFile(flags.config, "utf8");
    } catch (e) {
      throw new CliError(
        `--config ${flags.config}: ${(e as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : (e as Error).message}`,
        2,
      );
    }
    try {
      doc = (parseYaml(text) ?? {}) as Record<string, unknown>;
    } catch (e) {
      throw new CliError(`${flags.config}: invalid YAML: ${(e as Error).message}`, 2);
    }
    if (typeof doc !== "object" || Array.isArray(doc))
      throw new CliError(`${flags.config}: expected a YAML mapping with endpoint, model, runtime, resources`, 2);
  } else if (!flags.model) {
    throw new CliError("give --model <name> (and optionally --version), or --config <file.yaml>", 2);
  }
  const input = structuredClone(doc) as DeploymentConfigInput & Record<string, unknown>;
  const model = (input.model ?? {}) as Record<string, unknown>;
  const runtime = (input.runtime ?? {}) as Record<string, unknown>;
  const resources = (input.resources ?? {}) as Record<string, unknown>;
  if (flags.model) model.name = flags.model;
  if (flags.version) model.version = flags.version;
  if (flags.replicas !== undefined) resources.replicas = flags.replicas;
  if (flags.gpuType) resources.gpu_type = flags.gpuType;
  if (flags.quantization) runtime.quantization = flags.quantization;
  if (flags.speculativeModel) runtime.speculative_model = flags.speculativeModel;
  if (flags.numSpeculativeTokens !== undefined) runtime.num_speculative_tokens = flags.numSpeculativeTokens;
  const parsed = DeploymentConfig.safeParse({ ...input, model, runtime, resources });
  if (!parsed.success) throw new CliError(`${flags.config ?? "deployment"}: ${describeIssues(parsed.error)}`, 2);
  return parsed.data;
}
