/**
 * `platform inference autoscale <model> --config <file>` applies an autoscaling
 * file; `platform inference autoscale status <model> [--json]` shows what the
 * scaler sees and why it last acted. One command takes both forms, so either
 * line works exactly as the product's documentation writes it.
 */
import { readFile } from "node:fs/promises";
import type { Command } from "commander";
import { parse as parseYaml } from "yaml";
import { describeAutoscaling, formatDuration, parseAutoscalingFor } from "../autoscaling/config.ts";
import type { AutoscalingStatus } from "../autoscaling/decision.ts";
import { ApiClient } from "../client/api.ts";
import { CliError } from "./common/errors.ts";
import { printJson, printTable } from "./common/output.ts";

type Flags = { config?: string; json?: boolean };

export function registerAutoscale(inference: Command): void {
  inference
    .command("autoscale <model> [model]")
    .usage("<model> --config <file> | status <model> [--json]")
    .description("apply an autoscaling file to an endpoint, or show its scaling status (`autoscale status <model>`)")
    .option(
      "--config <file>",
      "autoscaling YAML: endpoint, autoscaling.{enabled, min_replicas, max_replicas, target_queue_depth, scale_up_cooldown, scale_down_cooldown, scale_down_delay}",
    )
    .option("--json", "print JSON")
    .action(async (first: string, second: string | undefined, flags: Flags) => {
      // `autoscale status <model>` unless a file is given: then "status" is an endpoint's name.
      if (first === "status" && flags.config === undefined) {
        if (second === undefined)
          throw new CliError("which endpoint? `platform inference autoscale status <model>`", 2);
        return showStatus(second, flags);
      }
      if (second !== undefined)
        throw new CliError(
          `unexpected argument "${second}"; usage: platform inference autoscale <model> --config <file>`,
          2,
        );
      if (flags.config === undefined) {
        throw new CliError(
          `give the autoscaling file: platform inference autoscale ${first} --config <file> (or \`autoscale status ${first}\` to see the current state)`,
          2,
        );
      }
      return apply(first, flags.config, flags);
    });
}

async function apply(model: string, file: string, flags: Flags): Promise<void> {
  const document = await readYaml(file);
  // Checked here too, so a wrong file is told before anything is sent; the gateway checks it alike.
  const parsed = parseAutoscalingFor(document, model, "the endpoint on the command line");
  if (!parsed.ok) throw new CliError(`${file}: ${parsed.error}`, 2);
  const api = await ApiClient.fromCredentials();
  const status = await api.request<AutoscalingStatus>(
    "PUT",
    `/admin/v1/endpoints/${encodeURIComponent(model)}/autoscaling`,
    document,
  );
  if (flags.json) return printJson(status);
  console.log(`autoscaling for ${model}: ${describeAutoscaling(parsed.value)}`);
  console.log(
    `replicas ${status.replicas.ready} ready of ${status.replicas.desired} wanted; watch it with \`platform inference autoscale status ${model}\``,
  );
}

async function showStatus(model: string, flags: Flags): Promise<void> {
  const api = await ApiClient.fromCredentials();
  const s = await api.request<AutoscalingStatus>("GET", `/admin/v1/endpoints/${encodeURIComponent(model)}/autoscaling`);
  if (flags.json) return printJson(s);
  const c = s.config;
  printTable(
    [
      "ENDPOINT",
      "AUTOSCALING",
      "MIN-MAX",
      "TARGET/REPLICA",
      "REPLICAS (ready/current/desired)",
      "QUEUE (waiting/active)",
    ],
    [
      [
        s.endpoint,
        !s.configured ? "not configured" : s.error ? "unreadable" : s.enabled ? "on" : "off",
        c ? `${c.min_replicas}-${c.max_replicas}` : "-",
        c ? String(c.target_queue_depth) : "-",
        `${s.replicas.ready}/${s.replicas.current}/${s.replicas.desired}`,
        `${s.queue.waiting}/${s.queue.active}`,
      ],
    ],
  );
  if (s.error) console.log(s.error);
  else if (!s.configured || !c) {
    console.log(
      `no autoscaling configured; apply a file with \`platform inference autoscale ${s.endpoint} --config <file>\``,
    );
  } else {
    console.log(
      `cooldowns: scale-up ${c.scale_up_cooldown}, scale-down ${c.scale_down_cooldown}; scale-down delay ${c.scale_down_delay}`,
    );
  }
  if (s.waits) {
    const delay =
      s.waits.scale_down_delay_ms === null
        ? "not running (demand is not low)"
        : `${left(s.waits.scale_down_delay_ms)} left`;
    console.log(
      `time left: scale-up cooldown ${left(s.waits.scale_up_cooldown_ms)}, scale-down cooldown ${left(s.waits.scale_down_cooldown_ms)}, scale-down delay ${delay}`,
    );
  }
  console.log(
    `scaler: ${s.scaler.holder ? `${s.scaler.holder} (holds the lease)` : "none running: nothing will scale until `platform up` or `platform scaler` runs"}`,
  );
  if (s.decisions.length === 0) {
    if (s.configured) console.log("no decisions yet");
    return;
  }
  console.log("recent decisions, newest first:");
  printTable(
    ["TIME", "ACTION", "REPLICAS", "REASON"],
    s.decisions.map((d) => [
      d.repeats > 1 ? `${clock(d.since)}-${clock(d.at)}` : clock(d.at),
      d.repeats > 1 ? `${d.action} ×${d.repeats}` : d.action,
      d.from === d.to ? String(d.to) : `${d.from} → ${d.to}`,
      d.reason,
    ]),
  );
}

async function readYaml(file: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (e) {
    throw new CliError(
      `--config ${file}: ${(e as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : (e as Error).message}`,
      2,
    );
  }
  try {
    return parseYaml(text) ?? {};
  } catch (e) {
    throw new CliError(`${file}: invalid YAML: ${(e as Error).message}`, 2);
  }
}

function left(ms: number): string {
  return formatDuration(Math.ceil(ms / 1000) * 1000);
}

function clock(at: number): string {
  return new Date(at).toTimeString().slice(0, 8);
}
