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
});
