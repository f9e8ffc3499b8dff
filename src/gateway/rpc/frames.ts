/**
 * Enveloped messages (a flags byte, a 4-byte big-endian length, the bytes), as Connect streams,
 * gRPC and gRPC-Web frame them, read from chunks as they arrive. The Connect passthrough only
 * watches the frames go by (to learn a stream's final code from its end-stream message or
 * gRPC-Web trailers) and copies nothing else; the gRPC transcoder takes every message.
 * A message is capped as its header is read (the length field allows 4 GiB), and every gunzip
 * stops at the same cap (`inflate`): a tenant's request or its service's answer cannot make the
 * gateway hold more than PLATFORM_RPC_MAX_MESSAGE_BYTES per message.
 */
import { gunzipSync } from "node:zlib";
import type { PlatformError } from "../../contracts/errors.ts";
import { rpcError } from "./errors.ts";

/** A message over the cap; `whose`: "request" or "answer", for the message. */
export function messageTooLarge(max: number, whose: string, size?: number): PlatformError {
  const got = size === undefined ? "inflates past it" : `is ${size} bytes`;
  return rpcError(
    "resource_exhausted",
    `the ${whose} message ${got}; the gateway carries messages of at most ${max} bytes (PLATFORM_RPC_MAX_MESSAGE_BYTES)`,
  );
}

/** gunzip, stopping at `max` bytes out: a small body that inflates to gigabytes is refused at once. */
export function inflate(bytes: Uint8Array, max: number, whose: string): Buffer {
  try {
    return gunzipSync(bytes, { maxOutputLength: max });
  } catch (e) {
    if ((e as { code?: unknown }).code === "ERR_BUFFER_TOO_LARGE" || e instanceof RangeError)
      throw messageTooLarge(max, whose);
    throw e;
  }
}

export class FrameReader {
  private header = new Uint8Array(5);
  private headerFill = 0;
  private flags = 0;
  private remaining = 0;
  private parts: Uint8Array[] | undefined;
  private readonly capture: (flags: number) => boolean;
  private readonly onFrame: (flags: number, payload: Uint8Array | undefined) => void;
  private readonly max: { bytes: number; whose: string };

  /**
   * `capture`: whether a frame with these flags is wanted whole; `onFrame` gets each frame once
   * complete (its payload only when captured). `max`: the largest message; `push` throws past it.
   */
  constructor(
    capture: (flags: number) => boolean,
    onFrame: (flags: number, payload: Uint8Array | undefined) => void,
    max: { bytes: number; whose: string },
  ) {
    this.capture = capture;
    this.onFrame = onFrame;
    this.max = max;
  }

  /** Between frames: a stream cut here lost no message halfway. */
  get atBoundary(): boolean {
    return this.headerFill === 0 && this.remaining === 0 && this.parts === undefined;
  }

  push(chunk: Uint8Array): void {
    let at = 0;
    while (at < chunk.length) {
      if (this.headerFill < 5) {
        const n = Math.min(5 - this.headerFill, chunk.length - at);
        this.header.set(chunk.subarray(at, at + n), this.headerFill);
        this.headerFill += n;
        at += n;
        if (this.headerFill < 5) return;
        this.flags = this.header[0] as number;
        this.remaining = new DataView(this.header.buffer).getUint32(1);
        if (this.remaining > this.max.bytes) throw messageTooLarge(this.max.bytes, this.max.whose, this.remaining);
        this.parts = this.capture(this.flags) ? [] : undefined;
        if (this.remaining === 0) this.complete();
        continue;
      }
      const n = Math.min(this.remaining, chunk.length - at);
      this.parts?.push(chunk.subarray(at, at + n));
      this.remaining -= n;
      at += n;
      if (this.remaining === 0) this.complete();
    }
  }

  private complete(): void {
    const parts = this.parts;
    this.headerFill = 0;
    this.parts = undefined;
    this.onFrame(this.flags, parts === undefined ? undefined : Buffer.concat(parts));
  }
}
