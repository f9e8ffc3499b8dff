/** The CLI's one progress display (src/cli/common/progress.ts), on a terminal and off one. */
import { describe, expect, it } from "vitest";
import { bar, Progress, progressReporter } from "../../src/cli/common/progress.ts";

function stream(tty: boolean) {
  const out: string[] = [];
  const s = { isTTY: tty, write: (text: string) => out.push(text) > 0 } as unknown as NodeJS.WriteStream;
  return { s, out };
}

describe("Progress", () => {
  it("on a terminal: a status redrawn in place, a line that clears it and stays", () => {
    const { s, out } = stream(true);
    const p = new Progress(s);
    p.status("1/4");
    p.status("2/4");
    p.line("done 4/4");
    p.done();
    expect(out).toEqual(["\r1/4\x1b[K", "\r2/4\x1b[K", "\r\x1b[Kdone 4/4\n"]);
  });

  it("off a terminal: lines only, a status at most every few seconds", () => {
    const { s, out } = stream(false);
    const p = new Progress(s);
    p.status("1/4");
    p.status("2/4");
    p.line("done");
    expect(out).toEqual(["1/4\n", "done\n"]);
  });
});

describe("progressReporter", () => {
  it("draws a byte bar that stays when done on a terminal", () => {
    const { s, out } = stream(true);
    const r = progressReporter("downloading m", s);
    r.update(512, 1024);
    r.done();
    expect(out.at(-1)).toBe(`\r\x1b[Kdownloading m ${bar(0.5, 24)}  50% 512 bytes / 1 KiB\n`);
  });

  it("writes a line per 10% off a terminal", () => {
    const { s, out } = stream(false);
    const r = progressReporter("up", s);
    for (let received = 0; received <= 100; received += 5) r.update(received, 100);
    r.done();
    expect(out).toHaveLength(11);
    expect(bar(0.5, 10)).toBe("[#####-----]");
  });
});
