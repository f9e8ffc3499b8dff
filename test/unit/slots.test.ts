import { describe, expect, it } from "vitest";
import { PlatformError } from "../../src/contracts/errors.ts";
import { Slots } from "../../workers/slots.ts";

const never = () => new AbortController().signal;

describe("Slots (a replica's sequences, with prefetched jobs waiting for them)", () => {
  it("hands out free slots at once and the rest first come, first served", async () => {
    const slots = new Slots(2);
    await slots.acquire(never());
    await slots.acquire(never());
    const order: string[] = [];
    const a = slots.acquire(never()).then(() => order.push("a"));
    const b = slots.acquire(never()).then(() => order.push("b"));
    await new Promise((r) => setTimeout(r, 10));
    expect(order).toEqual([]);
    slots.release();
    await a;
    expect(order).toEqual(["a"]);
    slots.release();
    await b;
    expect(order).toEqual(["a", "b"]);
  });

  it("lets a cancelled waiter leave without taking a slot from the next one", async () => {
    const slots = new Slots(1);
    await slots.acquire(never());
    const abort = new AbortController();
    const cancelled = slots.acquire(abort.signal);
    const next = slots.acquire(never());
    abort.abort();
    await expect(cancelled).rejects.toMatchObject({ status: 499, code: "cancelled" });
    slots.release();
    await next; // the slot went to the waiter still there
    const late = slots.acquire(AbortSignal.abort());
    await expect(late).rejects.toBeInstanceOf(PlatformError);
  });

  it("fails a waiter with 503 queue_timeout and Retry-After when its queue deadline passes", async () => {
    const slots = new Slots(1);
    await slots.acquire(never());
    const waiting = slots.acquire(never(), Date.now() + 30);
    await expect(waiting).rejects.toMatchObject({ status: 503, code: "queue_timeout", retryAfter: 5 });
    slots.release();
    // The timed-out waiter is gone: the slot is free again for a new caller.
    await slots.acquire(never(), Date.now() + 30);
  });

  it("gives a freed slot to the best band, then to the tenant holding fewest, then first come", async () => {
    const slots = new Slots(2);
    await slots.acquire(never(), undefined, { band: 10, flow: "flood" });
    await slots.acquire(never(), undefined, { band: 10, flow: "flood" });
    const order: string[] = [];
    const wait = (label: string, band: number, flow: string) =>
      slots.acquire(never(), undefined, { band, flow }).then(() => order.push(label));
    const waiting = [
      wait("flood-2", 10, "flood"),
      wait("flood-3", 10, "flood"),
      wait("quiet", 10, "quiet"),
      wait("batch", 21, "other"),
      wait("urgent", 3, "flood"),
    ];
    for (let i = 0; i < waiting.length; i++) {
      slots.release("flood");
      await new Promise((r) => setTimeout(r, 0));
    }
    await Promise.all(waiting);
    // urgent: its band; quiet: its tenant holds nothing where the flood holds a slot; batch last.
    expect(order).toEqual(["urgent", "quiet", "flood-2", "flood-3", "batch"]);
  });
});
