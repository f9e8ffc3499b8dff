/**
 * LoRA adapters on llama.cpp (docs/adapters.md). node-llama-cpp applies adapters to a whole context,
 * not to one sequence, so a replica serves each loaded adapter from a context of its own beside the
 * base's: made on the adapter's first request, holding `parallel` sequences so that its requests
 * batch together as the base's do, and bounded by `runtime.max_loras`. To make room the least
 * recently used adapter context without a request in flight is disposed, and with it the adapter's
 * weights; a request that finds every adapter context busy waits for one to fall idle.
 */
import type { LlamaContext, LlamaContextSequence, LlamaModel, Token } from "node-llama-cpp";
import { PlatformError } from "../../src/contracts/errors.ts";
import { logger } from "../../src/telemetry/log.ts";
import { SequencePool, type Taken } from "./llamacpp-sequences.ts";

const log = logger("llamacpp");

/** One adapter's context and its free sequences (chosen by their caches, as the base's are). */
export type Lane = {
  context: LlamaContext;
  free: SequencePool;
  /** Sequences taken and not yet given back. */
  active: number;
  lastUsed: number;
  /** The adapter's GGUF file; undefined for the base's lane. */
  adapterPath?: string;
};

/** How an adapter context is made: the base context's settings, with the adapter applied. */
export type MakeContext = (adapterPath: string) => Promise<LlamaContext>;

export class AdapterLanes {
  private readonly lanes = new Map<string, Lane>();
  private readonly model: LlamaModel;
  private readonly make: MakeContext;
  private readonly max: number;
  /** Serializes lane creation and eviction, so two first requests never make one adapter's context twice. */
  private lock: Promise<unknown> = Promise.resolve();
  private idle: (() => void)[] = [];
  /** Contexts made and disposed so far, for the replica's metrics. */
  loads = 0;
  evictions = 0;

  constructor(model: LlamaModel, make: MakeContext, max: number) {
    this.model = model;
    this.make = make;
    this.max = max;
  }

  stats(): { loaded: number; loads: number; evictions: number; names: string[] } {
    return { loaded: this.lanes.size, loads: this.loads, evictions: this.evictions, names: this.loaded() };
  }

  /** Adapters loaded now, most recently used last (for tests and status). */
  loaded(): string[] {
    return [...this.lanes.entries()].sort((a, b) => a[1].lastUsed - b[1].lastUsed).map(([ref]) => ref);
  }

  /**
   * A sequence of `ref`'s context (its GGUF at `path`) for `prompt`, made (and room made) when it has
   * none. The lane counts the sequence as active until `release`.
   */
  async take(ref: string, path: string, prompt: readonly Token[]): Promise<{ lane: Lane; taken: Taken }> {
    const existing = this.lanes.get(ref);
    if (existing && existing.free.size > 0) return this.claim(existing, prompt);
    const run = this.lock.then(async () => {
      const lane = this.lanes.get(ref) ?? (await this.open(ref, path));
      return this.claim(lane, prompt);
    });
    this.lock = run.catch(() => undefined);
    return run;
  }

  /** Gives a sequence back; an adapter context left with none in flight may now be evicted. */
  release(lane: Lane, sequence: LlamaContextSequence): void {
    lane.free.give(sequence);
    lane.active--;
    if (lane.active === 0) {
      const waiting = this.idle;
      this.idle = [];
      for (const wake of waiting) wake();
    }
  }

  async dispose(): Promise<void> {
    for (const lane of this.lanes.values()) await lane.context.dispose();
    this.lanes.clear();
  }

  private claim(lane: Lane, prompt: readonly Token[]): { lane: Lane; taken: Taken } {
    const taken = lane.free.take(prompt);
    // The worker's slots never let more requests in than a context has sequences.
    if (!taken) throw new Error("an adapter context has no free sequence");
    lane.active++;
    lane.lastUsed = performance.now();
    return { lane, taken };
  }

  private async open(ref: string, path: string): Promise<Lane> {
    while (this.lanes.size >= this.max) {
      const victim = [...this.lanes.entries()]
        .filter(([, l]) => l.active === 0)
        .sort((a, b) => a[1].lastUsed - b[1].lastUsed)[0];
      if (victim) await this.evict(victim[0], victim[1]);
      else await new Promise<void>((resolve) => this.idle.push(resolve));
    }
    let context: LlamaContext;
    try {
      context = await this.make(path);
    } catch (e) {
      // The library's message names the file on this node: logged here, not sent to the client.
      log.error({ adapter: ref, err: e }, `adapter ${ref} could not be loaded`);
      throw new PlatformError(
        500,
        "adapter_load_failed",
        `adapter ${ref} could not be loaded by llama.cpp on this replica (its log says why)`,
        "adapter",
      );
    }
    const free = new SequencePool(Array.from({ length: context.totalSequences }, () => context.getSequence()));
    const lane: Lane = { context, free, active: 0, lastUsed: performance.now(), adapterPath: path };
    this.lanes.set(ref, lane);
    this.loads++;
    log.info({ adapter: ref, loaded: this.lanes.size }, `adapter ${ref} loaded`);
    return lane;
  }

  private async evict(ref: string, lane: Lane): Promise<void> {
    this.lanes.delete(ref);
    this.evictions++;
    await lane.context.dispose();
    // node-llama-cpp keeps an adapter's weights until the model is disposed; with no context using them
    // they are freed here, so loading and evicting many adapters over a replica's life stays bounded.
    const held = (this.model as unknown as { _loraAdapters?: Map<string, { dispose(): Promise<void> }> })._loraAdapters;
    if (lane.adapterPath && held instanceof Map) {
      for (const [path, lora] of held) {
        if (path === lane.adapterPath || path.endsWith(lane.adapterPath)) {
          held.delete(path);
          await lora.dispose();
        }
      }
    }
    log.info({ adapter: ref }, `adapter ${ref} unloaded (least recently used)`);
  }
}
