/**
 * The CLI's one progress display, on stderr (stdout stays the table or the JSON): a line redrawn in
 * place on a terminal; elsewhere (a file, a pipe, CI logs) lines now and then. Long commands
 * (benchmark, evaluation, a batch job followed) report through Progress; transfers through
 * progressReporter, which draws a byte bar with it.
 */
import { formatBytes } from "../../contracts/bytes.ts";

export class Progress {
  private readonly stream: NodeJS.WriteStream;
  /** A terminal: `status` redraws one line in place (and a bar is worth drawing). */
  readonly tty: boolean;
  private drawn = false;
  private lastLine = 0;
  constructor(stream: NodeJS.WriteStream = process.stderr) {
    this.stream = stream;
    this.tty = stream.isTTY === true;
  }
  /** A line that stays. */
  line(text: string): void {
    this.stream.write(this.tty && this.drawn ? `\r\x1b[K${text}\n` : `${text}\n`);
    this.drawn = false;
    this.lastLine = Date.now();
  }
  /** A passing state, replaced by the next; without a terminal, one every few seconds becomes a line. */
  status(text: string): void {
    if (this.tty) {
      this.stream.write(`\r${text}\x1b[K`);
      this.drawn = true;
    } else if (Date.now() - this.lastLine >= 5_000) {
      this.line(text);
    }
  }
  done(): void {
    if (this.tty && this.drawn) this.stream.write("\r\x1b[K");
    this.drawn = false;
  }
}

/** `[####------]`: `fraction` (0 to 1) of `width`. */
export function bar(fraction: number, width: number): string {
  const filled = Math.round(Math.min(1, Math.max(0, fraction)) * width);
  return `[${"#".repeat(filled)}${"-".repeat(width - filled)}]`;
}

export type ProgressReporter = { update: (received: number, total: number | null) => void; done: () => void };

/** A transfer's bytes: a bar redrawn at most every 100 ms on a terminal, a line per 10% elsewhere. */
export function progressReporter(label: string, stream: NodeJS.WriteStream = process.stderr): ProgressReporter {
  const progress = new Progress(stream);
  let lastStep = -1;
  let lastDraw = 0;
  let shown: string | undefined;
  const describe = (received: number, total: number | null) => {
    if (total === null || total <= 0) return `${label} ${formatBytes(received)}`;
    const pct = Math.min(100, Math.floor((received / total) * 100));
    return `${label} ${bar(pct / 100, 24)} ${String(pct).padStart(3)}% ${formatBytes(received)} / ${formatBytes(total)}`;
  };
  return {
    update(received, total) {
      if (progress.tty) {
        const now = Date.now();
        if (now - lastDraw < 100 && received !== total) return;
        lastDraw = now;
        shown = describe(received, total);
        progress.status(shown);
        return;
      }
      // Without a terminal: one line per 10% (or per 64 MiB when the size is unknown).
      const step = total && total > 0 ? Math.floor((received / total) * 10) : Math.floor(received / (64 * 1024 * 1024));
      if (step === lastStep) return;
      lastStep = step;
      progress.line(describe(received, total));
    },
    done() {
      // The last bar stays on the terminal.
      if (shown !== undefined) progress.line(shown);
    },
  };
}
