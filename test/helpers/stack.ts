/**
 * Starting the platform in tests the way users start it: `platform up` as a
 * child process, with its own data dir, config dir and embedded Redis.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const BIN = fileURLToPath(new URL("../../bin/platform.js", import.meta.url));

export type Stack = {
  baseUrl: string;
  /** The gateway's metrics port's /metrics (docs/observability.md, "The metrics port"). */
  metricsUrl: string;
  apiKey: string;
  redisUrl: string;
  dataDir: string;
  /** Environment for running the CLI against this stack. */
  env: NodeJS.ProcessEnv;
  output: () => string;
  process: ChildProcess;
  admin: <T>(method: string, path: string, body?: unknown) => Promise<{ status: number; body: T }>;
  waitFor: (check: () => Promise<boolean>, what: string, timeoutMs?: number) => Promise<void>;
  stop: () => Promise<number | null>;
};

export type StackOptions = { model?: string; args?: string[]; env?: NodeJS.ProcessEnv; waitAvailable?: boolean };

export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const dir = await mkdtemp(join(tmpdir(), "platform-stack-"));
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PLATFORM_CONFIG_DIR: join(dir, "config"),
    PLATFORM_DATA_DIR: join(dir, "data"),
    REDIS_URL: undefined,
    PLATFORM_BASE_URL: undefined,
    PLATFORM_API_KEY: undefined,
    ...options.env,
  };
  const args = [
    BIN,
    "up",
    "--port",
    "0",
    ...(options.model ? ["--model", options.model] : []),
    ...(options.args ?? []),
  ];
  const child = spawn(process.execPath, args, { env, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (out += d));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));

  const started = Date.now();
  while (!/Press Ctrl-C to stop/.test(out)) {
    if (child.exitCode !== null) throw new Error(`platform up exited early (${child.exitCode}):\n${out}`);
    if (Date.now() - started > 60_000) throw new Error(`platform up did not start in 60 s:\n${out}`);
    await sleep(50);
  }
  const baseUrl = (out.match(/base URL\s+(\S+)\/v1/) ?? [])[1] as string;
  const apiKey = (out.match(/API key\s+(\S+)/) ?? [])[1] as string;
  const metricsUrl = (out.match(/metrics\s+(http:\/\/\S+\/metrics)/) ?? [])[1] as string;
  // `up` prints the URL with its password masked and says where the password is kept.
  const shownRedisUrl = (out.match(/redis\s+(rediss?:\/\/\S+)/) ?? [])[1] as string;
  const passwordFile = (out.match(/password in (\S+)\)/) ?? [])[1];
  const redisUrl = passwordFile
    ? shownRedisUrl.replace(":***@", `:${encodeURIComponent((await readFile(passwordFile, "utf8")).trim())}@`)
    : shownRedisUrl;

  const admin = async <T>(method: string, path: string, body?: unknown) => {
    const res = await fetch(`${baseUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as T };
  };
  const waitFor = async (check: () => Promise<boolean>, what: string, timeoutMs = 60_000) => {
    const t0 = Date.now();
    while (!(await check().catch(() => false))) {
      if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}; platform output:\n${out}`);
      await sleep(100);
    }
  };
  const stack: Stack = {
    baseUrl,
    metricsUrl,
    apiKey,
    redisUrl,
    dataDir: join(dir, "data"),
    env: { ...env, PLATFORM_BASE_URL: baseUrl, PLATFORM_API_KEY: apiKey },
    output: () => out,
    process: child,
    admin,
    waitFor,
    stop: async () => {
      if (child.exitCode === null) child.kill("SIGINT");
      const code = await exited;
      await rm(dir, { recursive: true, force: true });
      return code;
    },
  };
  if (options.model && options.waitAvailable !== false) {
    const name = (out.match(/endpoint\s+(\S+) \(starting/) ?? [])[1] as string;
    await waitFor(
      async () => (await admin<{ state: string }>("GET", `/admin/v1/endpoints/${name}`)).body.state === "available",
      `endpoint ${name} to be available`,
    );
  }
  return stack;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

export type CliResult = { code: number | null; stdout: string; stderr: string };

/**
 * Runs the real `platform` binary as a child process; in `cwd`, as a person runs it inside a
 * workspace; `input` on its stdin (a password for `--password-stdin`), else none.
 */
export function runCli(args: string[], env: NodeJS.ProcessEnv, cwd?: string, input?: string): Promise<CliResult> {
  return new Promise((resolve) => {
    const stdin = input === undefined ? "ignore" : "pipe";
    const child = spawn(process.execPath, [BIN, ...args], { cwd, env, stdio: [stdin, "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (d) => (stdout += d));
    child.stderr?.on("data", (d) => (stderr += d));
    child.once("exit", (code) => resolve({ code, stdout, stderr }));
    if (input !== undefined) child.stdin?.end(input);
  });
}
