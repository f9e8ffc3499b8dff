/** A thread of the grammar pool (grammar-pool.ts): a JSON schema (as JSON) in, its GBNF text or why not out. */
import { readlinkSync } from "node:fs";
import { setPriority } from "node:os";
import { parentPort } from "node:worker_threads";
import { PlatformError } from "../../src/contracts/errors.ts";
import { jsonSchemaGbnf, prepareJsonGbnf } from "./json-gbnf.ts";

const port = parentPort;
if (!port) throw new Error("grammar-thread.ts runs as a worker thread of grammar-pool.ts");
// Below the replica's own threads (nice 10): a conversion takes the CPU that serving leaves. Linux
// gives a thread a priority of its own by its id, which /proc/thread-self names; elsewhere it stays as is.
try {
  setPriority(Number(readlinkSync("/proc/thread-self").split("/").at(-1)), 10);
} catch {
  // not Linux, or not allowed: the thread keeps the process's priority
}
await prepareJsonGbnf();
port.on("message", async ({ json, param }: { json: string; param: string }) => {
  try {
    port.postMessage({ grammar: await jsonSchemaGbnf(json, param) });
  } catch (e) {
    // The pool makes the error again from its fields: a class does not cross threads.
    const { status, code, message } =
      e instanceof PlatformError ? e : { status: 500, code: "engine_error", message: (e as Error).message };
    port.postMessage({ error: { status, code, message, param: e instanceof PlatformError ? e.param : null } });
  }
});
port.postMessage({ ready: true });
