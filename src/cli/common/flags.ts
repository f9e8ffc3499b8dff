/**
 * Number flags, as commander `argParser`s: a bad value throws commander's InvalidArgumentError, so
 * the message names the option and the value (`option '--replicas <n>' argument 'x' is invalid.
 * expected a whole number from 0 to 100`) and the command exits 2 before anything runs.
 */
import { InvalidArgumentError } from "commander";

/** A whole number within [min, max] (decimal digits only: "1e3", "0x10" and "" are refused). */
export function wholeNumber(min = 0, max = Number.MAX_SAFE_INTEGER): (text: string) => number {
  return (text) => {
    const n = Number(text);
    if (!/^\s*\d+\s*$/.test(text) || !Number.isSafeInteger(n) || n < min || n > max)
      throw new InvalidArgumentError(
        max === Number.MAX_SAFE_INTEGER
          ? `expected a whole number ≥ ${min}`
          : `expected a whole number from ${min} to ${max}`,
      );
    return n;
  };
}

/** A finite number, greater than `above` when given (`positiveNumber` is `realNumber({ above: 0 })`). */
export function realNumber(bounds: { above?: number; min?: number; max?: number } = {}): (text: string) => number {
  return (text) => {
    const n = Number(text);
    const { above, min, max } = bounds;
    if (
      text.trim() === "" ||
      !Number.isFinite(n) ||
      (above !== undefined && n <= above) ||
      (min !== undefined && n < min) ||
      (max !== undefined && n > max)
    ) {
      const range = [
        above !== undefined ? `> ${above}` : undefined,
        min !== undefined ? `≥ ${min}` : undefined,
        max !== undefined ? `≤ ${max}` : undefined,
      ].filter(Boolean);
      throw new InvalidArgumentError(`expected a number${range.length ? ` ${range.join(" and ")}` : ""}`);
    }
    return n;
  };
}

export const positiveNumber = realNumber({ above: 0 });

/** A comma-separated list of whole numbers within [min, max], repeats dropped: `--concurrency 1,4,16`. */
export function wholeNumberList(min = 0, max = Number.MAX_SAFE_INTEGER): (text: string) => number[] {
  const one = wholeNumber(min, max);
  return (text) => {
    try {
      return [...new Set(text.split(",").map(one))];
    } catch {
      throw new InvalidArgumentError(`expected comma-separated whole numbers from ${min} to ${max}`);
    }
  };
}

/**
 * `parse`, or the word "none" (a limit removed: `keys update --rpm none`). "none" and not null:
 * commander stores a parser's null as "".
 */
export function orNone<T>(parse: (text: string) => T): (text: string) => T | "none" {
  return (text) => {
    if (text === "none") return "none";
    try {
      return parse(text);
    } catch (e) {
      if (e instanceof InvalidArgumentError) throw new InvalidArgumentError(`${e.message} or none`);
      throw e;
    }
  };
}
