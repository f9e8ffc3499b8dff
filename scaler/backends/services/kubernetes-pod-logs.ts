/**
 * Services' pod logs on Kubernetes, tailed by polling (the client has no follow that survives a
 * scaler restart): each pod's new lines, bounded per read and per line, forwarded to the
 * ServiceReports once each, with a restarted container's previous lines first
 * (docs/services.md, "Logs"). kubernetes.ts polls it on every reconciler tick.
 */
import type { CoreV1Api, V1Pod } from "@kubernetes/client-node";
import { logger } from "../../../src/telemetry/log.ts";
import type { ServiceRecord, ServiceReports } from "./backend.ts";
import { SERVICE_ANNOTATIONS, SERVICE_CONTAINER } from "./kubernetes-manifests.ts";
import { call, isNotFound, KubernetesApiError } from "../kubernetes-api.ts";

const log = logger("services-kubernetes");

/** Log polling bounds: what one request may return, how far back a poll reaches, how much of a new pod. */
export const LOG_LIMITS = {
  /** Bytes per request (`limitBytes`): a chatty pod is read in slices, one per poll. */
  bytesPerPoll: 256 * 1024,
  /** A poll never reaches further back than this (`sinceSeconds`): a backend that fell behind skips ahead. */
  maxLookbackSeconds: 300,
  /** A pod seen for the first time: its last lines only (`tailLines`). */
  firstTailLines: 200,
  /** Seconds added to each poll's window: the kubelet's clock is not the scaler's; duplicates are dropped by timestamp. */
  skewSeconds: 2,
  /** Characters kept of one line. */
  lineChars: 8192,
  /** Log lines put in a failed rollout's reason, per pod, and pods looked at. */
  reasonLines: 10,
  reasonPods: 2,
} as const;

/** Where a pod's log was read up to: the last line's timestamp (comparable form) and the lines at exactly that time. */
type LogCursor = { key: string; atMs: number; atKey: Set<string>; restarts: number };

/**
 * The kubelet writes RFC 3339 with up to nine fraction digits, trailing zeros dropped
 * ("...:05.1Z" is later than "...:05.05Z"): padded to nine, the strings order as the times do.
 */
export function timestampKey(time: string): string | undefined {
  const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z$/.exec(time);
  return m ? `${m[1]}.${(m[2] ?? "").padEnd(9, "0")}` : undefined;
}

/** `<timestamp> <text>` lines (timestamps=true), complete ones only: a read cut by limitBytes ends mid-line. */
export function parseLogLines(body: string): { time: string; key: string; text: string }[] {
  const lines = body.split("\n");
  lines.pop(); // after the last "\n": empty, or a line cut short
  const out: { time: string; key: string; text: string }[] = [];
  for (const line of lines) {
    const space = line.indexOf(" ");
    const time = space > 0 ? line.slice(0, space) : line;
    const key = timestampKey(time);
    if (key) out.push({ time, key, text: space > 0 ? line.slice(space + 1) : "" });
  }
  return out;
}

const keyOf = (org: string, name: string) => `${org}/${name}`;
const isBadRequest = (error: unknown) => error instanceof KubernetesApiError && error.status === 400;

export class PodLogTailer {
  private readonly cursors = new Map<string, LogCursor>();
  private readonly polled = new Map<string, number>();

  /**
   * `intervalMs`: how often each service's pods are read at most; `startedAt`: pods that started
   * before it are read from then on, not from their start (their lines were forwarded before a
   * restart of the scaler).
   */
  private readonly core: CoreV1Api;
  private readonly namespace: string;
  private readonly reports: ServiceReports;
  private readonly intervalMs: number;
  private readonly startedAt: number;

  constructor(core: CoreV1Api, namespace: string, reports: ServiceReports, intervalMs: number, startedAt = Date.now()) {
    this.core = core;
    this.namespace = namespace;
    this.reports = reports;
    this.intervalMs = intervalMs;
    this.startedAt = startedAt;
  }

  /** A pod gone: its cursor with it. */
  forgetPod(pod: string): void {
    this.cursors.delete(pod);
  }

  /** A service removed. */
  forgetService(org: string, name: string): void {
    this.polled.delete(keyOf(org, name));
  }

  /**
   * Reads each pod's new lines, at most every `logIntervalMs` per service. The client has no
   * `sinceTime`, so a read asks for `sinceSeconds` back to the last line forwarded (plus the
   * clock skew allowance, at most `maxLookbackSeconds`) and drops what it already forwarded by
   * timestamp; `limitBytes` bounds each read, a cut line is read again next time. A container
   * that restarted has its previous instance's last lines read first. A log that cannot be
   * read (a container still waiting) is tried again next time; it never fails `apply`.
   */
  async poll(service: ServiceRecord, pods: V1Pod[]): Promise<void> {
    const key = keyOf(service.org, service.name);
    const now = Date.now();
    if (now - (this.polled.get(key) ?? 0) < this.intervalMs) return;
    this.polled.set(key, now);
    for (const pod of pods) {
      const name = pod.metadata?.name;
      const container = pod.status?.containerStatuses?.find((c) => c.name === SERVICE_CONTAINER);
      if (
        !name ||
        !container ||
        (!container.state?.running && !container.state?.terminated && !container.lastState?.terminated)
      )
        continue;
      const tag = pod.metadata?.annotations?.[SERVICE_ANNOTATIONS.tag] ?? "";
      const cursor = this.cursors.get(name);
      const restarts = container.restartCount ?? 0;
      const window = (fromMs: number) =>
        Math.min(LOG_LIMITS.maxLookbackSeconds, Math.max(1, Math.ceil((now - fromMs) / 1000) + LOG_LIMITS.skewSeconds));
      const podStart = pod.status?.startTime ? new Date(pod.status.startTime).getTime() : now;
      const query = cursor
        ? { sinceSeconds: window(cursor.atMs) }
        : podStart < this.startedAt
          ? { sinceSeconds: window(this.startedAt) }
          : { tailLines: LOG_LIMITS.firstTailLines };
      const next: LogCursor = cursor ?? { key: "", atMs: 0, atKey: new Set(), restarts: 0 };
      // The instance before a restart first (its lines are older), when this one has not been read since.
      if (restarts > next.restarts) await this.readAndForward(service, name, tag, next, { ...query, previous: true });
      next.restarts = restarts;
      if (container.state?.running || container.state?.terminated)
        await this.readAndForward(service, name, tag, next, query);
      this.cursors.set(name, next);
    }
  }

  private async readAndForward(
    service: ServiceRecord,
    pod: string,
    tag: string,
    cursor: LogCursor,
    query: { sinceSeconds?: number; tailLines?: number; previous?: boolean },
  ): Promise<void> {
    let body: string;
    try {
      body = await this.read(pod, query);
    } catch (error) {
      if (!isBadRequest(error) && !isNotFound(error))
        log.debug({ service: keyOf(service.org, service.name), pod }, `reading the log: ${(error as Error).message}`);
      return;
    }
    await this.forward(service, pod, tag, cursor, body);
  }

  private async forward(service: ServiceRecord, pod: string, tag: string, cursor: LogCursor, body: string) {
    for (const line of parseLogLines(body)) {
      if (line.key < cursor.key || (line.key === cursor.key && cursor.atKey.has(line.text))) continue;
      if (line.key > cursor.key) {
        cursor.key = line.key;
        cursor.atKey = new Set();
        cursor.atMs = Date.parse(line.time);
      }
      cursor.atKey.add(line.text);
      await this.reports.log(service.org, service.name, {
        replica: pod,
        tag,
        text: line.text.slice(0, LOG_LIMITS.lineChars),
        at: cursor.atMs,
      });
    }
  }

  async read(pod: string, query: { sinceSeconds?: number; tailLines?: number; previous?: boolean }): Promise<string> {
    return call(`read log of pod ${this.namespace}/${pod}`, () =>
      this.core.readNamespacedPodLog({
        name: pod,
        namespace: this.namespace,
        container: SERVICE_CONTAINER,
        timestamps: true,
        limitBytes: LOG_LIMITS.bytesPerPoll,
        ...query,
      }),
    );
  }
}
