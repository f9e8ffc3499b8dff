/**
 * `platform up`: the whole platform on one machine, in the foreground — its own
 * Redis (unless REDIS_URL is set), the gateway, the local replica backend with
 * its reconciler and autoscaler, and workers as child processes. Ctrl-C stops all of it.
 */
import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { Command } from "commander";
import { LocalBackend } from "../../scaler/backends/endpoints/local.ts";
import { startScaler } from "../../scaler/run.ts";
import { createServiceBackend } from "../../scaler/start/services.ts";
import { NAME_PATTERN } from "../contracts/deployment.ts";
import { announceStates, deployFromSource, endpointNameFor } from "../endpoints/from-source.ts";
import { startGatewayRole } from "../gateway/server/main.ts";
import { bootstrapAtStart, operatorKey } from "../keys/bootstrap.ts";
import { bounded, onStopSignals } from "../process/shutdown.ts";
import { WORKER_NODE_FLAGS } from "../process/worker-env.ts";
import { superviseEmbeddedRedis } from "../redis/supervisor.ts";
import { type Control, connectControl, maskRedisUrl } from "../redis/connection.ts";
import { ensurePrivateDir } from "../redis/embedded.ts";
import { taskOf } from "../models/record.ts";
import { type CliSettings, loadSettings, type Settings } from "../settings/index.ts";
import { UP_REGISTRY_ADDRESSES } from "../settings/registries.ts";
import { parseStorageRoot, type StorageRoot } from "../storage/policy.ts";
import { configureLogging, logLine } from "../telemetry/log.ts";
import { startTracing, stopTracing } from "../telemetry/tracing.ts";
import { readCredentials, writeCredentials } from "../client/credentials.ts";
import { CliError } from "./common/errors.ts";
import { wholeNumber } from "./common/flags.ts";
import { taskFlag } from "./training.ts";
import { progressReporter } from "./common/progress.ts";

type UpFlags = {
  model?: string;
  name?: string;
  task?: string;
  replicas: number;
  parallel?: number;
  host: string;
  port: number;
  metricsPort?: number;
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
    .option("--replicas <n>", "replicas for --model", wholeNumber(0), 1)
    .option("--parallel <n>", "sequences each replica serves at once", wholeNumber(1))
    .option("--host <host>", "gateway address", "127.0.0.1")
    .option("--port <port>", "gateway port (0: any free port)", wholeNumber(0, 65535), 8000)
    .option(
      "--metrics-port <port>",
      "the gateway's Prometheus /metrics port, apart from the API (env PLATFORM_METRICS_PORT, default 9464; any free port with --port 0)",
      wholeNumber(0, 65535),
    )
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
  // One machine, one operator: a registry on its loopback (the dev loop's) may be named unless the
  // operator sets PLATFORM_IMAGE_REGISTRIES_ALLOWED_ADDRESSES (docs/security.md, "Outbound calls a tenant names").
  const env = { PLATFORM_IMAGE_REGISTRIES_ALLOWED_ADDRESSES: UP_REGISTRY_ADDRESSES, ...process.env };
  const loaded = loadSettings(flags.dataDir ? { ...env, PLATFORM_DATA_DIR: resolve(flags.dataDir) } : env);
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
    : await superviseEmbeddedRedis(join(settings.dataDir, "redis"), {
        onNote: (line) => console.log(line),
        onEvent: event,
        server: settings.queue.redisServer,
        budget: { restarts: settings.queue.redisRestarts, windowMs: settings.queue.redisRestartWindowMs },
      });
  const redisUrl = settings.redisUrl ?? (redis as NonNullable<typeof redis>).url;
  const ctl = connectControl(redisUrl, settings.prefix);
  const apiKey = await bootstrapKey(ctl, settings.bootstrapAdminKey, settings.cli);

  const role = await startGatewayRole(
    ctl,
    { ...settings, redisUrl },
    { host: flags.host, port: flags.port, metricsPort: flags.metricsPort },
  );
  const { gateway } = role;
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
  // Fine-tuning jobs train here too (docs/fine-tuning.md); clusters run `platform trainer` instead.
  // GPU jobs too when the trainer's torch sees a GPU; otherwise it says they wait for a GPU trainer.
  const trainer = await (await import("../../workers/trainer/coordinator.ts")).startTrainer(
    ctl,
    { ...settings, redisUrl },
    { gpu: "auto", log: (line) => event(line) },
  );

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
    await role.stopCoordinators();
    await bounded(trainer.stop(), 10_000);
    await bounded(scaler.stop(), 5_000);
    await bounded(Promise.all([backend.close(), services.close()]), settings.drainTimeoutMs + 20_000);
    await role.close();
    await stopTracing();
    await bounded(ctl.redis.quit(), 2_000);
    await redis?.stop();
    log("stopped.");
    process.exit(code);
  };
  // Redis could not be kept running: no job can be handed back, so the replicas are killed, not drained.
  redis?.onGiveUp(async (line) => {
    log(line);
    stopping = true;
    await backend.kill();
    await bounded(services.close(), 2_000);
    process.exit(1);
  });
  // SIGHUP, a closed terminal: the same clean stop, rather than Node's default of dying on the spot.
  onStopSignals((signal) => void shutdown(signal), ["SIGINT", "SIGTERM", "SIGHUP"]);

  let endpointName: string | undefined;
  try {
    if (flags.model) endpointName = await deployModel(ctl, settings, flags);
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
  log(`  metrics    ${gateway.metricsUrl} (Prometheus, no key: keep this port off the public network)`);
  if (endpointName) log(`  endpoint   ${endpointName} (starting; \`platform inference status ${endpointName}\`)`);
  if (!settings.bootstrapAdminKey) log(`  API key    ${apiKey}`);
  else
    log(
      `  API key    the one in PLATFORM_BOOTSTRAP_ADMIN_KEY${apiKey ? "" : " was refused (see above); the admin key registered before still works"}`,
    );
  if (credsFile) log(`             (saved to ${credsFile} for the CLI)`);
  log(`  data dir   ${settings.dataDir}`);
  // Which llama.cpp binary CPU replicas load (the worker logs what it did load): `platform engine build` makes this CPU's.
  const { chooseBinary } = await import("../../workers/engines/llamacpp-binary.ts");
  log(
    `  llama.cpp  ${await chooseBinary(settings.engine).then(
      (c) => c.note,
      (e: Error) => e.message,
    )}`,
  );
  const { decoderNote } = await import("../../workers/engines/llama-server-build.ts");
  log(`  decoding   ${decoderNote(settings.engine)}`);
  // Never the password: terminals are scrolled back, logs are shared.
  log(`  redis      ${maskRedisUrl(redisUrl)}${redis ? ` (embedded, AOF on; password in ${redis.passwordFile})` : ""}`);
  log("Press Ctrl-C to stop.");
  log("");
  // Image endpoints need torch and diffusers in PLATFORM_IMAGES_PYTHON; said once known (docs/images.md).
  void import("../../workers/engines/diffusers.ts")
    .then(({ picturesSupport }) => picturesSupport(settings.pictures.python))
    .then((s) => event(`images: ${s.line}`));
  if (endpointName) void announceStates(ctl, endpointName, event);
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
  const { key, minted } = await operatorKey(ctl, saved);
  if (minted && saved.length > 0)
    console.log(`note: the key in ${cli.credentialsFile} is not valid here; a new admin key replaces it`);
  return key;
}

/** `--model`, checked, then registered (once) and deployed: src/endpoints/from-source.ts. Its endpoint name. */
async function deployModel(ctl: Control, settings: Settings, flags: UpFlags): Promise<string> {
  const source = flags.model as string;
  const remote = /^(https?|hf|s3):\/\//.test(source);
  const path = source.startsWith("file://") ? fileURLToPath(source) : resolve(source);
  if (!remote && !existsSync(path)) throw new CliError(`--model ${source}: no such file`);
  const name = flags.name ?? endpointNameFor(source);
  if (!NAME_PATTERN.test(name))
    throw new CliError(`--name "${name}": use letters, digits, ".", "_" or "-" (1-63 characters)`);
  // A remote download can take minutes: say how far it got.
  const progress = remote ? progressReporter(`downloading ${name}`, process.stdout) : undefined;
  const registered = await deployFromSource(ctl, settings, {
    source: remote ? source : path,
    remote,
    name,
    task: taskFlag(flags.task),
    replicas: flags.replicas,
    parallel: flags.parallel,
    onProgress: progress && ((p) => progress.update(p.received, p.total)),
  }).finally(() => progress?.done());
  if (registered) console.log(`registered ${name}@${registered.version} from ${source} (task ${taskOf(registered)})`);
  return name;
}
