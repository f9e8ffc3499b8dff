/**
 * Lua scripts run in Redis. Each is a file in a `lua/` folder beside the module that runs it,
 * read when that module loads (found from the module's own URL, wherever the source tree is),
 * and sent through ioredis's defineCommand, which does the rest: the text the first time on a
 * connection and its SHA-1 after that, the text again where Redis answers NOSCRIPT (a restart,
 * SCRIPT FLUSH), the same in a pipeline as alone, and on a Redis Cluster to its keys' node.
 */
import { readFileSync } from "node:fs";
import type { ChainableCommander } from "ioredis";
import type { RedisClient } from "./connection.ts";

type Arg = string | number;
/** What defineCommand adds to a client (and to the pipelines made from it). */
type Command = (numberOfKeys: number, ...keysThenArgs: Arg[]) => unknown;

export class LuaScript {
  /** The name it is defined under on a client: its file's URL, which no other script has. */
  private readonly name: string;
  private readonly lua: string;

  /** `lua/<name>.lua` beside the module at `moduleUrl` (its `import.meta.url`). */
  constructor(moduleUrl: string, name: string) {
    const file = new URL(`./lua/${name}.lua`, moduleUrl);
    this.name = file.href;
    this.lua = readFileSync(file, "utf8");
  }

  run(redis: RedisClient, keys: string[], args: Arg[]): Promise<unknown> {
    return this.commandOf(redis).call(redis, keys.length, ...keys, ...args) as Promise<unknown>;
  }

  /**
   * Appends it to `pipeline`. Its answer there is the script's even where Redis said NOSCRIPT:
   * ioredis then sends it again, whole, on its own, and the pipeline waits for that answer.
   */
  queue(pipeline: ChainableCommander, keys: string[], args: Arg[]): void {
    // A pipeline takes its client's scripts when it is made: one defined since is the client's.
    const client = (pipeline as unknown as { redis: RedisClient }).redis;
    this.commandOf(client).call(pipeline, keys.length, ...keys, ...args);
  }

  /** The command on `client`, defined there on first use (a client is made without knowing its scripts). */
  private commandOf(client: RedisClient): Command {
    const commands = client as unknown as Record<string, Command | undefined>;
    if (!commands[this.name]) client.defineCommand(this.name, { lua: this.lua });
    return commands[this.name] as Command;
  }
}
