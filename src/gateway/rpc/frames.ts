/**
 * Enveloped messages (a flags byte, a 4-byte big-endian length, the bytes), as Connect streams,
 * gRPC and gRPC-Web frame them, read from chunks as they arrive. The Connect passthrough only
 * watches the frames go by (to learn a stream's final code from its end-stream message or
 * gRPC-Web trailers) and copies nothing else; the gRPC transcoder takes every message.
 */

export class FrameReader {
  private header = new Uint8Array(5);
  private headerFill = 0;
  private flags = 0;
  private remaining = 0;
  private parts: Uint8Array[] | undefined;
  private readonly capture: (flags: number) => boolean;
  private readonly onFrame: (flags: number, payload: Uint8Array | undefined) => void;

  /** `capture`: whether a frame with these flags is wanted whole; `onFrame` gets each frame once complete (its payload only when captured). */
  constructor(capture: (flags: number) => boolean, onFrame: (flags: number, payload: Uint8Array | undefined) => void) {
    this.capture = capture;
    this.onFrame = onFrame;
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
