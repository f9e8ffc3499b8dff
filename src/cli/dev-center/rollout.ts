/**
 * `platform dev-center rollout start|status|undo|history`: a service's rollouts (docs/services.md).
 * A new tag, a restart at the current tag (the environment and secrets as they are now) or an undo
 * to the previous release each start one; the old replicas serve until the new ones are ready.
 */
import type { Command } from "commander";
import type { Rollout } from "../../services/record.ts";
import { ApiClient } from "../../client/api.ts";
import { CliError } from "../common/errors.ts";
import { printJson, printTable } from "../common/output.ts";
import { imageTag, type ServiceStatus, servicePath } from "./api.ts";
import { describeRollout, HISTORY_HEAD, historyRows, REPLICA_HEAD, replicaRows, statusHeadline } from "./format.ts";
import { followRollout } from "./watch.ts";

type StartFlags = { restart?: boolean; wait?: boolean; json?: boolean };

export function registerRollout(devCenter: Command): void {
  const rollout = devCenter.command("rollout").description("roll a service out to a new tag, restart it, undo");

  rollout
    .command("start <name> [tag]")
    .description("roll out a published tag, or --restart at the current one (to apply env and secret changes)")
    .option("--restart", "new replicas of the current tag, with the environment and secrets as they are now")
    .option("--wait", "follow the rollout until it completes or fails (exit 1 when it fails)")
    .option("--json", "print the rollout as JSON")
    .action(async (name: string, tag: string | undefined, flags: StartFlags) => {
      if (tag !== undefined && flags.restart)
        throw new CliError("give a <tag> or --restart, not both (--restart keeps the current tag)", 2);
      if (tag === undefined && !flags.restart)
        throw new CliError("give the <tag> to roll out, or --restart to restart at the current tag", 2);
      const body = tag !== undefined ? { tag: imageTag(tag) } : { restart: true };
      await start(name, body, flags);
    });

  rollout
    .command("undo <name>")
    .description("roll back to the release that served before the current one")
    .option("--wait", "follow the rollout until it completes or fails (exit 1 when it fails)")
    .option("--json", "print the rollout as JSON")
    .action(async (name: string, flags: StartFlags) => start(name, { undo: true }, flags));

  rollout
    .command("status <name>")
    .description("the latest rollout: its phase, why it failed, each replica")
    .option("--watch", "poll every second until it completes (exit 0) or fails (exit 1), printing changes")
    .option("--json", "print the API's JSON (with --watch: one line per change)")
    .action(async (name: string, opts: { watch?: boolean; json?: boolean }) => {
      const path = servicePath(name, "/status");
      const api = await ApiClient.fromCredentials();
      if (opts.watch) {
        await followRollout(api, name, { json: opts.json });
        return;
      }
      const s = await api.request<ServiceStatus>("GET", path);
      if (opts.json) return printJson(s);
      console.log(statusHeadline(s));
      if (s.phase === "failed") console.log(`reason: ${s.reason ?? s.rollout.reason ?? "none given"}`);
      console.log(`serving: ${s.current ? s.current.tag : "nothing yet"}`);
      if (s.replicas.length > 0) printTable(REPLICA_HEAD, replicaRows(s.replicas));
    });

  rollout
    .command("history <name>")
    .description("the service's rollouts, newest first")
    .option("--json", "print the API's JSON")
    .action(async (name: string, opts: { json?: boolean }) => {
      const path = servicePath(name, "/rollouts");
      const api = await ApiClient.fromCredentials();
      const answer = await api.request<{ data: Rollout[] }>("GET", path);
      if (opts.json) return printJson(answer);
      printTable(HISTORY_HEAD, historyRows(answer.data));
    });
}

async function start(name: string, body: Record<string, unknown>, flags: StartFlags): Promise<void> {
  const path = servicePath(name, "/rollouts");
  const api = await ApiClient.fromCredentials();
  const r = await api.request<Rollout>("POST", path, body);
  if (flags.json) printJson(r);
  else {
    const verb = r.cause === "restart" ? "restarting" : r.cause === "undo" ? "undoing" : "rolling out";
    console.log(`${verb} ${name}:${r.release.tag} (rollout ${r.id}: ${describeRollout(r)})…`);
    if (!flags.wait) console.log(`follow it: platform dev-center rollout status ${name} --watch`);
  }
  if (flags.wait) await followRollout(api, name, { json: flags.json, rolloutId: r.id });
}
