/**
 * Following a rollout until it ends (`rollout status --watch`, `--wait` on deploy and rollout
 * start/undo): the status route polled every second, each change printed as it is seen, ending
 * in one line: complete (exit 0) or failed with the reason (exit 1). The rollout's own deadline
 * (record.ts, `deadline_ms`) is what bounds the wait: the platform fails a rollout that overruns it.
 */
import type { ApiClient } from "../../client/api.ts";
import { CliError } from "../common/errors.ts";
import { type ServiceStatus, servicePath } from "./api.ts";
import { watchLines } from "./format.ts";

export const POLL_MS = 1000;

export type FollowOptions = {
  /** Print each changed status as one line of JSON instead of the lines people read. */
  json?: boolean;
  /** The rollout that was just started: an older one in the status means the status has not caught up. */
  rolloutId?: number;
};

export async function followRollout(api: ApiClient, name: string, opts: FollowOptions = {}): Promise<ServiceStatus> {
  let shown = new Set<string>();
  let replicas = new Set<string>();
  let lastJson = "";
  let following = opts.rolloutId;
  for (;;) {
    const status = await api.request<ServiceStatus>("GET", servicePath(name, "/status"));
    const id = status.rollout.id;
    if (following !== undefined && id < following) {
      await sleep(POLL_MS);
      continue;
    }
    if (following !== undefined && id > following)
      console.log(`rollout ${following} was superseded by rollout ${id}: following that one`);
    following = id;
    if (opts.json) {
      const line = JSON.stringify(status);
      if (line !== lastJson) console.log(line);
      lastJson = line;
    } else {
      const lines = watchLines(status);
      for (const line of lines) if (!shown.has(line)) console.log(line);
      const now = new Set(status.replicas.map((r) => r.id));
      // A replica that went (drained, replaced) is a change too, and shows in no line of its own.
      for (const id of replicas) if (!now.has(id)) console.log(`  ${id} gone`);
      shown = new Set(lines);
      replicas = now;
    }
    if (status.phase === "complete") {
      if (!opts.json)
        console.log(`rollout ${id} complete: ${name} serves ${status.current?.tag ?? status.rollout.release.tag}`);
      return status;
    }
    if (status.phase === "failed")
      throw new CliError(
        `rollout ${id} failed: ${status.reason ?? status.rollout.reason ?? "no reason given"}${
          status.current ? `\n${status.current.tag} keeps serving` : ""
        }`,
      );
    await sleep(POLL_MS);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
