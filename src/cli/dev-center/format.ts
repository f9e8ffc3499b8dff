/**
 * How the dev-center commands show services, rollouts and replicas to people: pure functions from
 * the API's answers to table rows and lines, so they are tested without a server (`--json` prints
 * the answers themselves).
 */
import type { Rollout } from "../../services/record.ts";
import type { ServiceStatus, ServiceView, StatusReplica, VarEntry } from "./api.ts";

/** `sha256:` and 12 hex digits: enough to tell two images apart on a terminal. */
export const shortDigest = (digest: string): string => digest.slice(0, 19);

/** Epoch ms → `2026-01-02T03:04:05Z` (UTC, as `platform images list` shows times). */
export const timestamp = (ms: number): string => new Date(ms).toISOString().replace(/\.\d+Z$/, "Z");

/** A span for people: `0.4s`, `12s`, `3m 05s`, `2h 03m`. */
export function elapsed(ms: number): string {
  if (ms < 0) return "0s";
  if (ms < 10_000 && ms % 1000 !== 0) return `${(ms / 1000).toFixed(1)}s`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const pad = (n: number) => String(n).padStart(2, "0");
  if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  return `${Math.floor(s / 3600)}h ${pad(Math.floor((s % 3600) / 60))}m`;
}

const who = (by: VarEntry["by"]): string => (typeof by === "string" ? by : by.name);

/** Ready and desired replicas of a service, from either form of its `replicas` (api.ts, ServiceView). */
export function replicaCounts(s: ServiceView): { ready: number; desired: number } {
  if (typeof s.replicas === "number") return { ready: 0, desired: s.replicas };
  return {
    ready: s.replicas.filter((r) => r.state === "ready").length,
    desired: s.desired_replicas ?? s.replicas.length,
  };
}

/** The replica list a service view carries, if it carries one. */
export const replicaList = (s: ServiceView): StatusReplica[] => (Array.isArray(s.replicas) ? s.replicas : []);

/** What a rollout does, in a few words: `1.0.0 → 1.1.0`, `restart at 1.1.0`, `undo to 1.0.0`. */
export function describeRollout(r: Rollout): string {
  const tag = r.release.tag;
  switch (r.cause) {
    case "deploy":
      return `deploy ${tag}`;
    case "restart":
      return `restart at ${tag}`;
    case "undo":
      return `undo ${r.from_tag ?? "-"} → ${tag}`;
    default:
      return `${r.from_tag ?? "-"} → ${tag}`;
  }
}

export const SERVICE_HEAD = ["NAME", "TAG", "READY/DESIRED", "PHASE", "URL"];

export function serviceRows(services: ServiceView[]): string[][] {
  return services.map((s) => {
    const { ready, desired } = replicaCounts(s);
    const tag = s.current?.tag ?? "-";
    // A rollout under way shows where it goes, beside what serves.
    const next =
      s.rollout.phase === "progressing" && s.rollout.release.tag !== tag ? ` → ${s.rollout.release.tag}` : "";
    return [s.name, `${tag}${next}`, `${ready}/${desired}`, s.rollout.phase, s.url ?? "-"];
  });
}

export const HISTORY_HEAD = ["ID", "TAG", "CAUSE", "PHASE", "STARTED", "DURATION", "BY"];

/** `now`: for a rollout still progressing, its duration so far. */
export function historyRows(rollouts: Rollout[], now = Date.now()): string[][] {
  return rollouts.map((r) => [
    String(r.id),
    r.release.tag,
    r.cause,
    r.phase,
    timestamp(r.started),
    r.finished === undefined ? `${elapsed(now - r.started)} so far` : elapsed(r.finished - r.started),
    r.by.name,
  ]);
}

export const REPLICA_HEAD = ["REPLICA", "TAG", "DIGEST", "STATE", "RESTARTS", "LAST EXIT"];

export function replicaRows(replicas: StatusReplica[]): string[][] {
  return replicas.map((r) => [r.id, r.tag, shortDigest(r.digest), r.state, String(r.restarts), lastExit(r)]);
}

function lastExit(r: StatusReplica): string {
  const e = r.last_exit;
  if (!e) return "-";
  return `${e.signal ? e.signal : `code ${e.code ?? "?"}`} at ${timestamp(e.at)}`;
}

/** `replicas: 2 ready, 1 starting` (no replicas: `none`). */
export function replicaSummary(replicas: StatusReplica[]): string {
  const counts = new Map<string, number>();
  for (const r of replicas) counts.set(r.state, (counts.get(r.state) ?? 0) + 1);
  const parts = [...counts].map(([state, n]) => `${n} ${state}`);
  return `replicas: ${parts.length > 0 ? parts.join(", ") : "none"}`;
}

/** The status's first line: `rollout 2 (1.0.0 → 1.1.0): progressing; replicas: 1 ready, 1 starting`. */
export function statusHeadline(s: ServiceStatus): string {
  return `rollout ${s.rollout.id} (${describeRollout(s.rollout)}): ${s.phase}; ${replicaSummary(s.replicas)}`;
}

/** One replica on one line, as `--watch` prints a change. */
export function replicaLine(r: StatusReplica): string {
  const exit = r.last_exit ? `, last exit ${lastExit(r)}` : "";
  return `  ${r.id} ${r.tag} ${shortDigest(r.digest)} ${r.state}, restarts ${r.restarts}${exit}`;
}

/**
 * The lines `--watch` shows for a status: the headline, then each replica. Printing only the lines
 * that were not there at the previous poll prints exactly what changed.
 */
export function watchLines(s: ServiceStatus): string[] {
  return [statusHeadline(s), ...s.replicas.map(replicaLine)];
}

export const VAR_HEAD = ["NAME", "VERSION", "UPDATED", "BY"];

/** Variables (`withValues`: their values, for env) or secrets (never a value, whatever the API sent). */
export function varRows(entries: VarEntry[], withValues: boolean): string[][] {
  return entries.map((e) => [
    e.name,
    ...(withValues ? [e.value ?? ""] : []),
    String(e.version),
    timestamp(e.updated),
    who(e.by),
  ]);
}

/** The overview's first `n` non-blank lines, for `service show`. */
export function overviewHead(markdown: string, n = 5): string[] {
  return markdown
    .split(/\r?\n/)
    .filter((l) => l.trim() !== "")
    .slice(0, n);
}
