/**
 * `platform up`: the whole platform on one machine, in the foreground — its own
 * Redis (unless REDIS_URL is set), the gateway, the local replica backend with
 * its reconciler and autoscaler, and workers as child processes. Ctrl-C stops all of it.
 */
import { createHash } from "node:crypto";
import { createReadStream, existsSync, statSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { basename, join, resolve } from "node:path";
import { pipeline } from "node:stream/promises";
import { fileURLToPath } from "node:url";
import type { Command } from "commander";
import { WORKER_NODE_FLAGS } from "../process/worker-env.ts";
import { LocalBackend } from "../../scaler/backends/local.ts";
import { startScaler } from "../../scaler/run.ts";
import { createServiceBackend } from "../../scaler/services.ts";
import { startBatchCoordinator } from "../batch/index.ts";
import { startEvaluationCoordinator } from "../evaluation/index.ts";
import { DeploymentConfig, NAME_PATTERN } from "../contracts/deployment.ts";
import { isOperator } from "../contracts/orgs.ts";
import { taskOf } from "../registry/version.ts";
import { countApiKeys, createApiKey, verifyApiKey } from "../keys/store.ts";
import { ensurePrivateDir, startEmbeddedRedis } from "../redis/embedded.ts";
import { deployEndpoint, findEndpoint, getEndpoint } from "../endpoints/store.ts";
import { type Control, connectControl, maskRedisUrl } from "../redis/connection.ts";
import { endpointStatus } from "../endpoints/status.ts";
import { trimMemoryWhenIdle } from "../process/idle-memory.ts";
import { startGateway } from "../gateway/app.ts";
import { importModel } from "../registry/import.ts";
import { listModelVersions } from "../registry/versions.ts";
import { type CliSettings, loadSettings, type Settings } from "../settings/index.ts";
import { openStore } from "../storage/index.ts";
import { parseStorageRoot, type StorageRoot } from "../storage/policy.ts";
import { configureLogging, logLine } from "../telemetry/log.ts";
import { startTracing, stopTracing } from "../telemetry/tracing.ts";
import { CliError } from "./errors.ts";
import { readCredentials, writeCredentials } from "./credentials.ts";
import { bootstrapAtStart } from "./keys.ts";
import { progressReporter } from "./progress.ts";
import { taskFlag } from "./training.ts";

type UpFlags = {
  model?: string;
  name?: string;
  task?: string;
  replicas: string;
  parallel?: string;
  host: string;
  port: string;
  dataDir?: string;
  storageRoot: string[];
};

const BIN = fileURLToPath(new URL("../../bin/platform.js", import.meta.url));

export function registerUp(program: Command): void {
  program
    .command("up")
    .description("run the whole platform on this machine (Redis, gateway, replica supervisor, workers)")
    .option(
      "--model <source>",
      "register and deploy this model: a GGUF file or a Hugging Face-style checkpoint directory (converted to GGUF), as a path, file://, https://, hf://org/repo/file.gguf or hf://org/repo",
    )
    .option("--name <endpoint>", "endpoint name for --model (default: the file name without .gguf)")
    .option(
      "--task <task>",
      "what --model serves: embed (/v1/embeddings) or generate; default: embed for encoder models (BERT family), generate otherwise",
    )
    .option("--replicas <n>", "replicas for --model", "1")
    .option("--parallel <n>", "sequences each replica serves at once")
    .option("--host <host>", "gateway address", "127.0.0.1")
    .option("--port <port>", "gateway port (0: any free port)", "8000")
    .option("--data-dir <dir>", "where Redis, artifacts and logs live (env PLATFORM_DATA_DIR)")
    .option(
      "--storage-root <uri>",
      "another directory or s3://bucket[/prefix] batch jobs and model sources may name (repeatable); <data-dir>/batch/ and the current directory always are",
      (value: string, all: string[]) => [...all, value],
      [] as string[],
    )
    .action(up);
}

async function up(flags: UpFlags): Promise<void> {
  taskFlag(flags.task); // a bad one is refused before anything starts
  // --data-dir is PLATFORM_DATA_DIR given on the command line: the same setting, so everything derived from it follows.
  const loaded = loadSettings(
    flags.dataDir ? { ...process.env, PLATFORM_DATA_DIR: resolve(flags.dataDir) } : process.env,
  );
  // One machine, one operator: its data dir's batch/ (where relative names go), the directory it was
  // started from (so relative paths in the CLI keep working), and whatever it names; see docs/security.md.
  const settings = {
    ...loaded,
    storageRoots: [...upStorageRoots(loaded.dataDir, flags.storageRoot), ...loaded.storageRoots],
  };
  // Text for the person at the terminal unless PLATFORM_LOG_FORMAT says otherwise; the workers follow (docs/tracing.md).
  const logFormat = configureLogging(settings.logging, { role: "up", defaultFormat: "text" });
  await startTracing(settings.tracing, "up");
  // Records, keys' hashes, the Redis password and AOF live here: this user's only.
  await ensurePrivateDir(settings.dataDir, (line) => console.log(line));
  await mkdir(join(settings.dataDir, "batch"), { recursive: true, mode: 0o700 });
  // `up`'s own lines (the banner, stopping) stay plain for the person reading them; what the
  // parts it runs report while serving goes through the logs.
  const log = (line: string) => console.log(line);
  const event = (line: string) => logLine(line);

  const redis = settings.redisUrl
    ? undefined
    : await startEmbeddedRedis(join(settings.dataDir, "redis"), {
        onNote: (line) => console.log(line),
        server: settings.queue.redisServer,
      });
  const redisUrl = settings.redisUrl ?? (redis as NonNullable<typeof redis>).url;
  const ctl = connectControl(redisUrl, settings.prefix);
  const apiKey = await bootstrapKey(ctl, settings.bootstrapAdminKey, settings.cli);

  const gateway = await startGateway({
    ctl,
    settings: { ...settings, redisUrl },
    host: flags.host,
    port: Number(flags.port),
  });
  const backend = new LocalBackend({
    ctl,
    workerCommand: [process.execPath, ...WORKER_NODE_FLAGS, BIN, "worker"],
    // Workers inherit this environment (and so its settings), with the Redis and data directory resolved here.
    env: {
      ...process.env,
      REDIS_URL: redisUrl,
      PLATFORM_DATA_DIR: settings.dataDir,
      PLATFORM_ARTIFACTS_URL: settings.artifactsUrl,
      PLATFORM_LOG_FORMAT: logFormat,
    },
    logDir: join(settings.dataDir, "logs"),
    // A worker past its drain deadline hands its jobs back and exits; SIGKILL only if that hangs.
    drainTimeoutMs: settings.drainTimeoutMs + 15_000,
    standby: settings.worker.standby,
    workerMetrics: settings.worker.metrics,
    onEvent: (m) => event(`[replicas] ${m}`),
  });
  // The autoscaler and the reconciler; they act only while this process holds the scaler lease.
  // Services (docs/services.md): processes run from published images, beside the model replicas.
  const services = await createServiceBackend("local", ctl, settings, (m) => event(`[services] ${m}`));
  const scaler = await startScaler(ctl, backend, { log: event, services });
  const coordinator = await startBatchCoordinator(ctl, { ...settings, redisUrl });
  const evaluator = await startEvaluationCoordinator(ctl, settings);
  // Fine-tuning jobs train here too (docs/fine-tuning.md); clusters run `platform trainer` instead.
  // GPU jobs too when the trainer's torch sees a GPU; otherwise it says they wait for a GPU trainer.
  const trainer = await (await import("../../workers/trainer/coordinator.ts")).startTrainer(
    ctl,
    { ...settings, redisUrl },
    { gpu: "auto", log: (line) => event(line) },
  );
  trimMemoryWhenIdle({ busy: () => gateway.awaiting() > 0 });

  let stopping = false;
  /** `code`: 0 for a stop asked for (a signal), 1 when `up` could not do what it was told. */
  const shutdown = async (signal: string, code = 0) => {
    if (stopping) {
      // Forced, but still complete: nothing this process started may outlive it.
      log("second signal: killing the replicas and stopping Redis now");
      await backend.kill();
      await bounded(services.close(), 2_000);
      await redis?.stop({ fast: true });
      process.exit(1);
    }
    stopping = true;
    log(`\n${signal}: stopping (draining replicas, then the gateway and Redis)...`);
    // Each step is bounded, so a dead dependency can never leave `up` hanging.
    await bounded(coordinator.stop(), 10_000);
    await bounded(evaluator.stop(), 10_000);
    await bounded(trainer.stop(), 10_000);
    await bounded(scaler.stop(), 5_000);
    await bounded(Promise.all([backend.close(), services.close()]), settings.drainTimeoutMs + 20_000);
    await bounded(gateway.close(), 5_000);
    await stopTracing();
    await bounded(ctl.redis.quit(), 2_000);
    await redis?.stop();
    log("stopped.");
    process.exit(code);
  };
  process.on("SIGINT", () => void shutdown("SIGINT"));
  process.on("SIGTERM", () => void shutdown("SIGTERM"));
  // A closed terminal: the same clean stop, rather than Node's default of dying on the spot.
  process.on("SIGHUP", () => void shutdown("SIGHUP"));

  let endpointName: string | undefined;
  try {
    if (flags.model) endpointName = await registerAndDeploy(ctl, settings, flags);
  } catch (e) {
    log(`error: ${(e as Error).message}`);
    await shutdown("error", 1);
    return;
  }
  // A refused bootstrap key is no credential: the file keeps what it had.
  const credsFile = apiKey
    ? await writeCredentials({ base_url: gateway.url, api_key: apiKey }, settings.cli)
    : undefined;
  log("");
  log("platform is up");
  log(`  base URL   ${gateway.url}/v1`);
  log(`  dashboard  ${gateway.url}/dashboard (sign in with the admin API key)`);
  if (endpointName) log(`  endpoint   ${endpointName} (starting; \`platform inference status ${endpointName}\`)`);
  if (!settings.bootstrapAdminKey) log(`  API key    ${apiKey}`);
  else
    log(
      `  API key    the one in PLATFORM_BOOTSTRAP_ADMIN_KEY${apiKey ? "" : " was refused (see above); the admin key registered before still works"}`,
    );
  if (credsFile) log(`             (saved to ${credsFile} for the CLI)`);
  log(`  data dir   ${settings.dataDir}`);
  // Never the password: terminals are scrolled back, logs are shared.
  log(`  redis      ${maskRedisUrl(redisUrl)}${redis ? ` (embedded, AOF on; password in ${redis.passwordFile})` : ""}`);
  log("Press Ctrl-C to stop.");
  log("");
  // Image endpoints need torch and diffusers in PLATFORM_IMAGES_PYTHON; said once known (docs/images.md).
  void import("../../workers/engines/diffusers.ts")
    .then(({ imagesSupport }) => imagesSupport(settings.images.python))
    .then((s) => event(`images: ${s.line}`));
  if (endpointName) void announceWhenAvailable(ctl, endpointName, event);
}

function upStorageRoots(dataDir: string, extra: string[]): StorageRoot[] {
  const roots: StorageRoot[] = [
    parseStorageRoot(join(dataDir, "batch"), "--data-dir"),
    parseStorageRoot(process.cwd(), "the current directory"),
  ];
  for (const root of extra) {
    try {
      roots.push(parseStorageRoot(/^[a-z][a-z0-9+.-]+:/i.test(root) ? root : resolve(root), "--storage-root"));
    } catch (e) {
      throw new CliError((e as Error).message, 2);
    }
  }
  return roots;
}

function bounded(work: Promise<unknown>, ms: number): Promise<unknown> {
  return Promise.race([work.catch(() => undefined), new Promise((r) => setTimeout(r, ms).unref())]);
}

/**
 * The operator's PLATFORM_BOOTSTRAP_ADMIN_KEY when set (compose: never minted,
 * never printed; undefined when refused because another one is registered);
 * else an API key in the credentials file (the default registry's first: `up`'s
 * port may have changed since) that is an operator's here; otherwise a newly
 * minted operator key (an admin of the install's own organization).
 */
async function bootstrapKey(
  ctl: Control,
  fromOperator: string | undefined,
  cli: CliSettings,
): Promise<string | undefined> {
  if (fromOperator) return (await bootstrapAtStart(ctl, fromOperator, "REDIS_URL")) ? fromOperator : undefined;
  // A file that does not parse holds no key to reuse; writing the new one mends it.
  const file = await readCredentials(cli).catch(() => ({ registries: {}, default: undefined }));
  const saved = Object.entries(file.registries)
    .sort(([a], [b]) => Number(b === file.default) - Number(a === file.default))
    .flatMap(([, entry]) => (entry.api_key ? [entry.api_key] : []));
  for (const key of saved) {
    const record = await verifyApiKey(ctl, key);
    if (record && isOperator(record)) return key;
  }
  const existing = saved.length > 0;
  const first = (await countApiKeys(ctl)) === 0;
  const { key } = await createApiKey(
    ctl,
    first ? "bootstrap-admin" : `admin-${new Date().toISOString().slice(0, 10)}`,
    "admin",
  );
  if (existing) console.log(`note: the key in ${cli.credentialsFile} is not valid here; a new admin key replaces it`);
  return key;
}

async function registerAndDeploy(ctl: Control, settings: Settings, flags: UpFlags): Promise<string> {
  const source = flags.model as string;
  const isRemote = /^(https?|hf|s3):\/\//.test(source);
  const path = source.startsWith("file://") ? fileURLToPath(source) : resolve(source);
  if (!isRemote && !existsSync(path)) throw new CliError(`--model ${source}: no such file`);
  const name = flags.name ?? endpointNameFor(source);
  if (!NAME_PATTERN.test(name))
    throw new CliError(`--name "${name}": use letters, digits, ".", "_" or "-" (1-63 characters)`);
  const task = taskFlag(flags.task);

  // The same artifact registered before is reused rather than copied again. A checkpoint directory
  // (registered for llama.cpp, so converted to GGUF at replica start) is recognised by its path.
  const directory = !isRemote && statSync(path).isDirectory();
  const digest = isRemote || directory ? undefined : await sha256(path);
  const versions = await listModelVersions(ctl, name);
  // A version registered for another task than --task asks for is not the same registration.
  let version = versions.find(
    (v) =>
      (digest ? v.sha256 === digest : v.source === (isRemote ? source : path)) &&
      (task === undefined || taskOf(v) === task),
  )?.version;
  if (!version) {
    // A remote download can take minutes: say how far it got.
    const progress = isRemote ? progressReporter(`downloading ${name}`, process.stdout) : undefined;
    const record = await importModel(
      {
        ctl,
        artifacts: openStore(settings.artifactsUrl, settings.storage.s3),
        scratchDir: join(settings.dataDir, "tmp"),
        sources: settings.sources,
        s3: settings.storage.s3,
      },
      {
        name,
        framework: "llamacpp",
        source: isRemote ? source : path,
        task,
        onProgress: progress && ((p) => progress.update(p.received, p.total)),
      },
    ).finally(() => progress?.done());
    version = record.version;
    console.log(`registered ${name}@${version} from ${source} (task ${taskOf(record)})`);
  }
  const existing = await findEndpoint(ctl, name);
  const replicas = Number(flags.replicas);
  if (!Number.isInteger(replicas) || replicas < 0)
    throw new CliError(`--replicas: expected a non-negative integer, got "${flags.replicas}"`);
  if (existing?.version !== version || existing.desired_replicas !== replicas) {
    const config = DeploymentConfig.parse({
      endpoint: name,
      model: { name, version, framework: "llamacpp" },
      resources: {
        ...existing?.config.resources,
        replicas,
        ...(flags.parallel ? { parallel: Number(flags.parallel) } : {}),
      },
      runtime: existing?.config.runtime ?? {},
    });
    await deployEndpoint(ctl, config);
  }
  return name;
}

export function endpointNameFor(source: string): string {
  const file = basename(source.split("?")[0] ?? source).replace(/\.gguf$/i, "");
  return (
    file
      .replace(/[^a-z0-9._-]/gi, "-")
      .replace(/^[^a-z0-9]+/i, "")
      .slice(0, 63) || "model"
  );
}

async function sha256(path: string): Promise<string> {
  const hash = createHash("sha256");
  await pipeline(createReadStream(path), hash);
  return hash.digest("hex");
}

async function announceWhenAvailable(ctl: Control, name: string, log: (line: string) => void): Promise<void> {
  let last = "";
  for (;;) {
    await new Promise((r) => setTimeout(r, 500));
    const endpoint = await getEndpoint(ctl, name).catch(() => undefined);
    if (!endpoint) return;
    const s = await endpointStatus(ctl, endpoint, { waiting: 0, active: 0 }).catch(() => undefined);
    if (!s || s.state === last) continue;
    last = s.state;
    log(
      `[endpoint] ${name}: ${s.state} (${s.replicas.ready}/${s.replicas.desired} ready)${s.errors.length ? ` — ${s.errors.join("; ")}` : ""}`,
    );
  }
}
