/**
 * Transfer progress on stderr (stdout stays clean for `--json`): a bar redrawn
 * in place on a terminal, a line per 10% when stderr is a file or a pipe.
 * Also the status line of long commands (benchmark, evaluation).
 */
import { formatBytes } from "../contracts/bytes.ts";

export type ProgressReporter = { update: (received: number, total: number | null) => void; done: () => void };

export function progressReporter(label: string, stream: NodeJS.WriteStream = process.stderr): ProgressReporter {
  const tty = stream.isTTY === true;
  let lastStep = -1;
  let lastDraw = 0;
  let drawn = false;
  const describe = (received: number, total: number | null) => {
    if (total === null || total <= 0) return `${label} ${formatBytes(received)}`;
    const pct = Math.min(100, Math.floor((received / total) * 100));
    const width = 24;
    const filled = Math.round((pct / 100) * width);
    return `${label} [${"#".repeat(filled)}${"-".repeat(width - filled)}] ${String(pct).padStart(3)}% ${formatBytes(received)} / ${formatBytes(total)}`;
  };
  return {
    update(received, total) {
      if (tty) {
        const now = Date.now();
        if (now - lastDraw < 100 && received !== total) return;
        lastDraw = now;
        drawn = true;
        stream.write(`\r${describe(received, total)}\x1b[K`);
        return;
      }
      // Without a terminal: one line per 10% (or per 64 MiB when the size is unknown).
      const step = total && total > 0 ? Math.floor((received / total) * 10) : Math.floor(received / (64 * 1024 * 1024));
      if (step === lastStep) return;
      lastStep = step;
      stream.write(`${describe(received, total)}\n`);
    },
    done() {
      if (tty && drawn) stream.write("\n");
    },
  };
}

/**
 * Progress of a long command on stderr, so stdout stays the table or the JSON: one line redrawn in
 * place on a terminal; elsewhere (a file, a pipe, CI logs) a line every few seconds.
 */
export class Progress {
  private readonly stream: NodeJS.WriteStream;
  private readonly tty: boolean;
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
  /** A passing state, replaced by the next. */
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
