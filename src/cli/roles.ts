/**
 * The long-running roles one image runs: `platform gateway`, `platform worker` and `platform scaler`.
 * Each loads only its own code: a worker has no use for the gateway or the Kubernetes client,
 * and every replica would pay for them in memory (see docs/performance.md).
 */
import type { Command } from "commander";
import { trimMemoryWhenIdle } from "../process/idle-memory.ts";
import { loadSettings } from "../settings/index.ts";
import { CliError } from "./common/errors.ts";
import { wholeNumber } from "./common/flags.ts";

export function registerRoles(program: Command): void {
  program
    .command("gateway")
    .description("run the HTTP gateway alone (clusters run several of these against one Redis)")
    .option("--host <host>", "address to bind", "0.0.0.0")
    .option("--port <port>", "port", wholeNumber(0, 65535), 8000)
    .action(async (opts: { host: string; port: number }) => {
      if (!loadSettings().redisUrl)
        throw new CliError("REDIS_URL is not set; the gateway needs the platform's Redis", 2);
      const { runGatewayProcess } = await import("../gateway/server/main.ts");
      await runGatewayProcess({ host: opts.host, port: opts.port });
    });

  program
    .command("worker")
    .description("run one replica of an endpoint (started for you by `platform up` or the scaler)")
    .option("--endpoint <name>", "endpoint to serve")
    .option("--replica-id <id>", "replica id (default: generated)")
    .option("--revision <id>", "which of the endpoint's revisions to run while an update rolls out (default: its own)")
    .option(
      "--health-port <port>",
      "serve /livez, /readyz and /metrics on this port (0: any free port, published in the replica record)",
      wholeNumber(0, 65535),
    )
    .option(
      "--standby",
      "load, then wait for the endpoint as a JSON line on stdin (how `platform up` keeps a spare worker)",
    )
    .action(
      async (opts: {
        endpoint?: string;
        replicaId?: string;
        revision?: string;
        healthPort?: number;
        standby?: boolean;
      }) => {
        if ((opts.endpoint === undefined) === !opts.standby)
          throw new CliError("give --endpoint <name> (or, as `platform up` does, --standby)", 2);
        const { runWorkerProcess } = await import("../../workers/main.ts");
        await runWorkerProcess({
          endpoint: opts.endpoint,
          replicaId: opts.replicaId,
          revision: opts.revision,
          healthPort: opts.healthPort,
        });
      },
    );

  program
    .command("scaler")
    .description("run the autoscaler and replica reconciler (one acts at a time, through a lease in Redis)")
    .option("--backend <kind>", "where replicas run: local (child processes) or kubernetes (Deployments)", "local")
    .option("--interval-ms <ms>", "time between scaler ticks", wholeNumber(1), 1000)
    .option(
      "--lease-ttl-ms <ms>",
      "how soon a standby scaler takes over from a dead one (default: max(5000, 3 ticks))",
      wholeNumber(1),
    )
    .option("--holder-id <id>", "name shown as the lease holder (default: <hostname>-<pid>)")
    .action(async (opts: { backend: string; intervalMs: number; leaseTtlMs?: number; holderId?: string }) => {
      if (opts.backend !== "local" && opts.backend !== "kubernetes")
        throw new CliError(`--backend: expected local or kubernetes, got "${opts.backend}"`, 2);
      const { intervalMs, leaseTtlMs } = opts;
      if (!loadSettings().redisUrl)
        throw new CliError("REDIS_URL is not set; the scaler needs the platform's Redis", 2);
      const { runScalerProcess } = await import("../../scaler/start/main.ts");
      trimMemoryWhenIdle();
      await runScalerProcess({ backend: opts.backend, intervalMs, leaseTtlMs, holderId: opts.holderId });
    });
}
