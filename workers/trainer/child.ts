/**
 * The trainer child process (train.py), as vLLM is run by its engine: spawned with the configured
 * Python, its stdout read as JSON lines, its stderr kept (the tail) for the log, its end reported
 * with the exit code or the signal that killed it.
 */
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export const TRAIN_SCRIPT = fileURLToPath(new URL("./train.py", import.meta.url));

export type TrainerLine = { type: string; [field: string]: unknown };
/** `spawnError`: the program could not be started at all (not found, not executable). */
export type ChildEnd = { code: number | null; signal: NodeJS.Signals | null; stderr: string; spawnError?: boolean };
export type TrainerChild = { pid: number | undefined; ended: Promise<ChildEnd>; kill: () => void };

const STDERR_KEPT = 8192;

export function spawnTrainer(python: string, args: string[], onLine: (line: TrainerLine) => void): TrainerChild {
  const child = spawn(python, [TRAIN_SCRIPT, ...args], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, PYTHONUNBUFFERED: "1", TOKENIZERS_PARALLELISM: "false", HF_HUB_OFFLINE: "1" },
  });
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString("utf8")).slice(-STDERR_KEPT);
  });
  const lines = createInterface({ input: child.stdout });
  lines.on("line", (text) => {
    try {
      const parsed = JSON.parse(text) as TrainerLine;
      if (parsed && typeof parsed.type === "string") onLine(parsed);
    } catch {
      // not ours (a library printing to stdout): ignored
    }
  });
  const ended = new Promise<ChildEnd>((resolve) => {
    child.once("error", (e) =>
      resolve({ code: 127, signal: null, stderr: `${stderr}\n${String(e)}`, spawnError: true }),
    );
    child.once("close", (code, signal) => resolve({ code, signal, stderr }));
  });
  return { pid: child.pid, ended, kill: () => child.kill("SIGKILL") };
}
