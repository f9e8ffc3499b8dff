/**
 * Watches a BullMQ queue's event stream (`<prefix>:<queue>:events`) from the
 * outside and counts events per job id: every time a worker takes a job it
 * emits `active`, so `active` events per job are engine invocations; a job
 * taken back from a dead replica counts as `requeued`.
 *
 * BullMQ caps that stream, so a reader that fell behind could silently miss
 * events; `drain()` compares what was read with the stream's own count of
 * entries ever added and reports the difference as `lost`.
 */
import { Redis } from "ioredis";
import { StreamReader } from "../../src/queue/stream-reader.ts";

/** `returnvalue`: a `completed` event's JSON return value, kept with `keepLog`. */
/** `at`: the entry's stream id (`<ms>-<seq>`), which orders events across a queue and its lanes. */
export type ObservedEvent = { event: string; jobId: string; returnvalue?: string; at: string };

export class QueueObserver {
  private readonly redisUrl: string;
  private readonly key: string;
  private readonly counts = new Map<string, Map<string, number>>();
  private readonly log: ObservedEvent[] | undefined;
  private reader: StreamReader | undefined;
  private read = 0;
  private baseAdded = 0;

  private constructor(redisUrl: string, key: string, keepLog: boolean) {
    this.redisUrl = redisUrl;
    this.key = key;
    this.log = keepLog ? [] : undefined;
  }

  static async start(
    redisUrl: string,
    prefix: string,
    queue: string,
    options: { keepLog?: boolean; fromStart?: boolean } = {},
  ): Promise<QueueObserver> {
    const observer = new QueueObserver(redisUrl, `${prefix}:${queue}:events`, options.keepLog ?? false);
    const info = options.fromStart ? { added: 0, lastId: "0-0" } : await observer.info();
    observer.baseAdded = info.added;
    observer.reader = new StreamReader(new Redis(redisUrl, { maxRetriesPerRequest: null }), observer.key, {
      from: info.lastId,
      count: 10_000,
    });
    observer.reader.start((entries) => observer.tally(entries));
    return observer;
  }

  count(jobId: string, event: string): number {
    return this.counts.get(jobId)?.get(event) ?? 0;
  }

  /** Job ids seen so far that start with `prefix`. */
  jobIds(prefix = ""): string[] {
    return [...this.counts.keys()].filter((id) => id.startsWith(prefix));
  }

  /**
   * Job ids a worker took (`active`) since the observer started. Use this rather than jobIds()
   * to leave out a job finished just before: a worker sends its reply before it tells BullMQ, so
   * that job's `completed` can arrive after the observer started.
   */
  takenJobIds(): string[] {
    return this.jobIds().filter((id) => this.count(id, "active") > 0);
  }

  events(): readonly ObservedEvent[] {
    return this.log ?? [];
  }

  /** Reads up to the stream's current end; `lost` counts entries trimmed before they were read. */
  async drain(): Promise<{ lost: number }> {
    for (;;) {
      const info = await this.info();
      if (info.length === 0 || info.lastId === this.reader?.position)
        return { lost: info.added - this.baseAdded - this.read };
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  async stop(): Promise<void> {
    await this.reader?.close();
  }

  private async info(): Promise<{ added: number; length: number; lastId: string }> {
    const probe = new Redis(this.redisUrl);
    try {
      const exists = await probe.exists(this.key);
      if (!exists) return { added: 0, length: 0, lastId: "0-0" };
      const raw = (await probe.call("XINFO", "STREAM", this.key)) as unknown[];
      const field = (name: string) => raw[raw.indexOf(name) + 1];
      return {
        added: Number(field("entries-added")),
        length: Number(field("length")),
        lastId: String(field("last-generated-id")),
      };
    } finally {
      probe.disconnect();
    }
  }

  private tally(entries: [string, string[]][]): void {
    for (const [at, fields] of entries) {
      this.read++;
      const raw = field(fields, "event");
      const jobId = field(fields, "jobId");
      if (raw === undefined || jobId === undefined) continue;
      // An active job handed back to the queue (a dead replica's, src/queue/reclaim.ts) is counted apart.
      const event = raw === "waiting" && field(fields, "prev") === "active" ? "requeued" : raw;
      let perJob = this.counts.get(jobId);
      if (!perJob) {
        perJob = new Map();
        this.counts.set(jobId, perJob);
      }
      perJob.set(event, (perJob.get(event) ?? 0) + 1);
      this.log?.push({ event, jobId, returnvalue: field(fields, "returnvalue"), at });
    }
  }
}

function field(fields: string[], name: string): string | undefined {
  for (let i = 0; i < fields.length; i += 2) if (fields[i] === name) return fields[i + 1];
  return undefined;
}

/**
 * A queue and its replicas' lanes (src/queue/lanes.ts) watched as one: a job may run from a lane
 * or from the shared queue, and move from one to the other. Lanes that appear later (a new
 * replica's) are found every 200 ms and read from their start.
 */
export class LanesObserver {
  private readonly observers: QueueObserver[];
  private readonly known: Set<string>;
  private readonly timer: NodeJS.Timeout;
  private finding: Promise<void> = Promise.resolve();

  private constructor(observers: QueueObserver[], known: Set<string>, find: () => Promise<void>) {
    this.observers = observers;
    this.known = known;
    this.timer = setInterval(() => {
      this.finding = this.finding.then(find, () => undefined);
    }, 200);
  }

  static async start(redisUrl: string, prefix: string, queue: string, options: { keepLog?: boolean } = {}) {
    const lanes = async () => {
      const probe = new Redis(redisUrl);
      try {
        const keys = await probe.keys(`${prefix}:${queue}~lane~*:events`);
        return keys.map((k) => k.slice(prefix.length + 1, -":events".length));
      } finally {
        probe.disconnect();
      }
    };
    const known = new Set(await lanes());
    const observers = await Promise.all(
      [queue, ...known].map((q) => QueueObserver.start(redisUrl, prefix, q, options)),
    );
    const self: LanesObserver = new LanesObserver(observers, known, async () => {
      for (const lane of await lanes()) {
        if (self.known.has(lane)) continue;
        self.known.add(lane);
        self.observers.push(await QueueObserver.start(redisUrl, prefix, lane, { ...options, fromStart: true }));
      }
    });
    return self;
  }

  count(jobId: string, event: string): number {
    return this.observers.reduce((n, o) => n + o.count(jobId, event), 0);
  }

  takenJobIds(): string[] {
    return [...new Set(this.observers.flatMap((o) => o.takenJobIds()))];
  }

  /** Every stream's events in one list, in the order their entries were added (to the millisecond). */
  events(): ObservedEvent[] {
    const key = (at: string) => at.split("-").map(Number) as [number, number];
    return this.observers
      .flatMap((o) => o.events())
      .sort((a, b) => {
        const [x, y] = [key(a.at), key(b.at)];
        return x[0] - y[0] || x[1] - y[1];
      });
  }

  async drain(): Promise<{ lost: number }> {
    await this.finding;
    const each = await Promise.all(this.observers.map((o) => o.drain()));
    return { lost: each.reduce((n, d) => n + d.lost, 0) };
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.finding;
    await Promise.all(this.observers.map((o) => o.stop()));
  }
}
