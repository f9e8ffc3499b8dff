/**
 * `platform up`'s embedded Redis, kept running: when redis-server ends without being asked to
 * (killed, crashed), it is started again at once on the same port with the same password, from
 * its append-only file, so every client's URL stays good and their connections come back by
 * themselves. Past a restart budget it gives up and says so, naming Redis and its log.
 */
import { type EmbeddedRedis, startEmbeddedRedis } from "./embedded.ts";

export type RedisRestartBudget = {
  /** Restarts allowed within `windowMs`; one more failure gives up. */
  restarts: number;
  windowMs: number;
};

export type SupervisedRedis = Omit<EmbeddedRedis, "exited" | "pid"> & {
  /** The redis-server running now (it changes with each restart). */
  readonly pid: number;
  /**
   * Called once, with the line to print, when Redis could not be kept running: past the restart
   * budget, or a restart that failed. Without a handler the line goes to stderr and the process
   * exits 1, since nothing can work without Redis.
   */
  onGiveUp: (handler: (line: string) => void) => void;
};

/** A start that fails is tried again after this long (counted against the budget). */
const RETRY_MS = 500;

export async function superviseEmbeddedRedis(
  dataDir: string,
  options: {
    onNote?: (line: string) => void;
    /** One line per death and restart. */
    onEvent?: (line: string) => void;
    server?: string;
    budget: RedisRestartBudget;
  },
): Promise<SupervisedRedis> {
  const start = (port?: number) =>
    startEmbeddedRedis(dataDir, { onNote: options.onNote, server: options.server, port });
  let current = await start();
  const { port, logfile } = current;
  const event = options.onEvent ?? ((line: string) => console.error(line));
  let stopping = false;
  let gaveUp: string | undefined;
  let giveUpHandler: ((line: string) => void) | undefined;
  const restarts: number[] = [];

  const giveUp = (why: string) => {
    gaveUp = `error: the embedded Redis ${why}; nothing can be served without it. Read its log: ${logfile}`;
    if (giveUpHandler) giveUpHandler(gaveUp);
    else {
      console.error(gaveUp);
      process.exit(1);
    }
  };

  const watch = (redis: EmbeddedRedis) => {
    void redis.exited.then(async (how) => {
      if (stopping) return;
      const died = Date.now();
      event(`[redis] redis-server (pid ${redis.pid}) ended (${how}); restarting it from its append-only file`);
      for (;;) {
        const now = Date.now();
        while (restarts.length > 0 && (restarts[0] as number) <= now - options.budget.windowMs) restarts.shift();
        if (restarts.length >= options.budget.restarts) {
          giveUp(
            `ended (${how}) after ${restarts.length} restart(s) within ${Math.round(options.budget.windowMs / 1000)} s (PLATFORM_REDIS_RESTARTS, PLATFORM_REDIS_RESTART_WINDOW_MS)`,
          );
          return;
        }
        restarts.push(now);
        try {
          current = await start(port);
        } catch (e) {
          how = (e as Error).message.split("\n")[0] as string;
          event(`[redis] restart failed: ${how}`);
          await new Promise((r) => setTimeout(r, RETRY_MS));
          continue;
        }
        if (stopping) {
          await current.stop({ fast: true });
          return;
        }
        event(`[redis] redis-server restarted (pid ${current.pid}) after ${Date.now() - died} ms`);
        watch(current);
        return;
      }
    });
  };
  watch(current);

  return {
    url: current.url,
    displayUrl: current.displayUrl,
    passwordFile: current.passwordFile,
    port,
    logfile,
    get pid() {
      return current.pid;
    },
    onGiveUp: (handler) => {
      giveUpHandler = handler;
      if (gaveUp) handler(gaveUp);
    },
    stop: async (stopOptions) => {
      stopping = true;
      await current.stop(stopOptions);
    },
  };
}
