/**
 * bench:fabric, the processes' own figures under `platform up` (fabric-engine.ts's stack): CLI
 * start-up (`platform --version`, `platform inference status --json`) against `node -e 0`,
 * interleaved; resident memory of the worker and of `up`, idle with the model loaded.
 */
import { spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { IDLE_CHECK_MS } from "../src/process/idle-memory.ts";
import { BIN, type OwnStack } from "../test/helpers/stack.ts";
import { sleep } from "./measure.ts";

function wallMs(args: string[], env: NodeJS.ProcessEnv): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(process.execPath, args, { env, stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    child.stderr.on("data", (d) => (err += d));
    child.once("exit", (code) =>
      code === 0 ? resolve(performance.now() - t0) : reject(new Error(`${args.join(" ")} exited ${code}: ${err}`)),
    );
  });
}

function procStatus(pid: number): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of readFileSync(`/proc/${pid}/status`, "utf8").split("\n")) {
    const i = line.indexOf(":");
    if (i > 0) out[line.slice(0, i)] = line.slice(i + 1).trim();
  }
  return out;
}
const rssMiB = (pid: number) => Number.parseInt(procStatus(pid).VmRSS ?? "0", 10) / 1024;
function childPids(parent: number): { pid: number; cmdline: string }[] {
  const out: { pid: number; cmdline: string }[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (Number(procStatus(Number(entry)).PPid) === parent)
        out.push({ pid: Number(entry), cmdline: readFileSync(`/proc/${entry}/cmdline`, "utf8").replaceAll("\0", " ") });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

export type CliRound = { node: number; version: number; status: number };

export async function measureCli(stack: OwnStack, endpoint: string, ROUNDS: number): Promise<CliRound[]> {
  // CLI start-up, interleaved with the floor any Node program pays.
  const cliRounds: { node: number; version: number; status: number }[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const node = await wallMs(["-e", "0"], stack.env);
    const version = await wallMs([BIN, "--version"], stack.env);
    const status = await wallMs([BIN, "inference", "status", endpoint, "--json"], stack.env);
    cliRounds.push({ node, version, status });
  }
  return cliRounds;
}

export type Rss = { up_mib: number; worker_mib: number; workers: number };

export async function measureRss(stack: OwnStack): Promise<Rss> {
  // Resident memory, idle with the model loaded: after two of the idle checks at which each
  // process gives back what its busy spell grew (src/process/idle-memory.ts).
  await sleep(2 * IDLE_CHECK_MS + 1000);
  const upPid = stack.process.pid as number;
  const workers = childPids(upPid).filter((c) => / worker\b/.test(c.cmdline));
  if (workers.length === 0) throw new Error(`no worker process found under platform up (pid ${upPid})`);
  const rss = {
    up_mib: rssMiB(upPid),
    worker_mib: Math.max(...workers.map((w) => rssMiB(w.pid))),
    workers: workers.length,
  };
  return rss;
}
