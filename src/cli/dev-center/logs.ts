/**
 * `platform dev-center logs <name> [-f] [--replica R] [--since 10m] [--tail N]`: a service's
 * replicas' output, read from the logs route's NDJSON (`{at, replica, tag, text}` a line) and
 * printed as `[<replica> <tag>] <text>`. With -f the connection stays open and lines are printed as
 * they come; Ctrl-C ends it as a finished command (exit 0), as `kubectl logs -f` does.
 */
import type { Command } from "commander";
import { ApiClient } from "../../client/api.ts";
import { CliError } from "../common/errors.ts";
import { failure, servicePath } from "./api.ts";
import { wholeNumber } from "../common/flags.ts";
import { sinceFlag } from "./flags.ts";

export type LogLine = { at: number; replica: string; tag: string; text: string };

type Flags = { follow?: boolean; replica?: string; since?: string; tail?: number };

/** One log line as printed; the text's own line end is dropped (console.log adds one). */
export const formatLogLine = (l: LogLine): string => `[${l.replica} ${l.tag}] ${l.text.replace(/\r?\n$/, "")}`;

export function registerLogs(devCenter: Command): void {
  devCenter
    .command("logs <name>")
    .description("the output of a service's replicas")
    .option("-f, --follow", "keep printing lines as they come (Ctrl-C ends it)")
    .option("--replica <id>", "only this replica's")
    .option("--since <duration>", "only lines from this long ago on, e.g. 10m, 30s, 2h", sinceFlag)
    .option("--tail <n>", "only the last n lines (then, with -f, the new ones)", wholeNumber(0, 100_000))
    .action(async (name: string, flags: Flags) => {
      const query = new URLSearchParams();
      if (flags.tail !== undefined) query.set("tail", String(flags.tail));
      if (flags.since !== undefined) query.set("since", flags.since);
      if (flags.replica !== undefined) query.set("replica", flags.replica);
      if (flags.follow) query.set("follow", "true");
      const path = `${servicePath(name, "/logs")}${query.size > 0 ? `?${query}` : ""}`;
      const api = await ApiClient.fromCredentials();
      const stop = new AbortController();
      const onSignal = () => stop.abort();
      process.once("SIGINT", onSignal);
      try {
        await stream(api, path, stop.signal);
      } catch (e) {
        if (!stop.signal.aborted) throw e;
      } finally {
        process.off("SIGINT", onSignal);
      }
    });
}

async function stream(api: ApiClient, path: string, signal: AbortSignal): Promise<void> {
  const res = await api.send("GET", path, { signal, headers: { accept: "application/x-ndjson" } });
  if (!res.ok) throw await failure("GET", path, res);
  if (!res.body) return;
  let buffered = "";
  for await (const chunk of res.body.pipeThrough(new TextDecoderStream())) {
    buffered += chunk;
    const lines = buffered.split("\n");
    buffered = lines.pop() ?? "";
    for (const line of lines) print(line);
  }
  print(buffered);
}

function print(text: string): void {
  if (text.trim() === "") return;
  let line: Partial<LogLine> & { error?: { message?: string; code?: string } };
  try {
    line = JSON.parse(text);
  } catch {
    // Not ours to drop: a line the server could not frame is still the service's output.
    console.log(text);
    return;
  }
  // A stream that fails after its 200 can only say so in-band: the error envelope as a line.
  if (line.error)
    throw new CliError(
      `${line.error.message ?? "the log stream failed"}${line.error.code ? ` (${line.error.code})` : ""}`,
    );
  console.log(
    formatLogLine({ at: line.at ?? 0, replica: line.replica ?? "?", tag: line.tag ?? "?", text: line.text ?? "" }),
  );
}
