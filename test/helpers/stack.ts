/**
 * Starting the platform in tests the way users start it: `platform up` as a
 * child process, with its own data dir, config dir and embedded Redis.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createWriteStream } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { api, type Call } from "./api.ts";
import { waitUntil } from "./wait.ts";

export const BIN = fileURLToPath(new URL("../../bin/platform.js", import.meta.url));

/** What a test drives: the gateway's URLs, the operator's key, the Redis it runs on and its data dir. */
export type Stack = {
  baseUrl: string;
  /** The gateway's metrics port's /metrics (docs/observability.md, "The metrics port"). */
  metricsUrl: string;
  apiKey: string;
  redisUrl: string;
  dataDir: string;
  /** Environment for running the CLI against this stack. */
  env: NodeJS.ProcessEnv;
  /** What `platform up` has printed so far. */
  output: () => string;
  /** The operator's authenticated call. */
  admin: Call;
  waitFor: (check: () => Promise<boolean>, what: string, timeoutMs?: number) => Promise<void>;
};

/** A stack this test started and stops (test/helpers/shared-stack.ts has the one files share). */
export type OwnStack = Stack & { process: ChildProcess; stop: () => Promise<number | null> };

/** The serializable part of a stack, handed from vitest's global setup to its test files. */
export type StackHandle = Omit<Stack, "output" | "admin" | "waitFor"> & { logFile?: string };

/** `logFile`: also write what `up` prints there, for files that read it from another process. */
export type StackOptions = {
  model?: string;
  args?: string[];
  env?: NodeJS.ProcessEnv;
  waitAvailable?: boolean;
  logFile?: string;
};

export async function startStack(options: StackOptions = {}): Promise<OwnStack> {
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
  const log = options.logFile ? createWriteStream(options.logFile) : undefined;
  const take = (d: Buffer) => {
    out += d;
    log?.write(d);
  };
  child.stdout.on("data", take);
  child.stderr.on("data", take);
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));

  await waitUntil("platform up to start", () => /Press Ctrl-C to stop/.test(out) || child.exitCode !== null, {
    timeoutMs: 60_000,
    intervalMs: 50,
    detail: () => `it printed:\n${out}`,
  });
  if (child.exitCode !== null) throw new Error(`platform up exited early (${child.exitCode}):\n${out}`);
  const baseUrl = (out.match(/base URL\s+(\S+)\/v1/) ?? [])[1] as string;
  const apiKey = (out.match(/API key\s+(\S+)/) ?? [])[1] as string;
  const metricsUrl = (out.match(/metrics\s+(http:\/\/\S+\/metrics)/) ?? [])[1] as string;
  // `up` prints the URL with its password masked and says where the password is kept.
  const shownRedisUrl = (out.match(/redis\s+(rediss?:\/\/\S+)/) ?? [])[1] as string;
  const passwordFile = (out.match(/password in (\S+)\)/) ?? [])[1];
  const redisUrl = passwordFile
    ? shownRedisUrl.replace(":***@", `:${encodeURIComponent((await readFile(passwordFile, "utf8")).trim())}@`)
    : shownRedisUrl;

  const stack: OwnStack = {
    ...attach(
      {
        baseUrl,
        metricsUrl,
        apiKey,
        redisUrl,
        dataDir: join(dir, "data"),
        env: { ...env, PLATFORM_BASE_URL: baseUrl, PLATFORM_API_KEY: apiKey },
      },
      () => out,
    ),
    process: child,
    stop: async () => {
      if (child.exitCode === null) child.kill("SIGINT");
      const code = await exited;
      log?.end();
      await rm(dir, { recursive: true, force: true });
      return code;
    },
  };
  if (options.model && options.waitAvailable !== false) {
    const name = (out.match(/endpoint\s+(\S+) \(starting/) ?? [])[1] as string;
    await waitAvailable(stack, name);
  }
  return stack;
}

/** A `Stack` over a handle: the calls and waits bound to it, `output` read by the given function. */
export function attach(handle: StackHandle, output: () => string): Stack {
  const waitFor = (check: () => Promise<boolean>, what: string, timeoutMs = 60_000) =>
    waitUntil(what, check, { timeoutMs, detail: () => `platform output:\n${output()}` });
  const { logFile: _, ...rest } = handle;
  return { ...rest, output, admin: api(handle.baseUrl, handle.apiKey), waitFor };
}

/** Waits until endpoint `name` is `available`. */
export function waitAvailable(stack: Stack, name: string, timeoutMs = 120_000): Promise<void> {
  return stack.waitFor(
    async () => (await stack.admin<{ state: string }>("GET", `/admin/v1/endpoints/${name}`)).body.state === "available",
    `endpoint ${name} to be available`,
    timeoutMs,
  );
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
