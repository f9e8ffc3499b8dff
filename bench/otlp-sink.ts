/**
 * A stand-in OTLP/HTTP collector for bench/hot-path.ts, in a process of its own so that receiving
 * spans never runs on the event loop that times the requests. Prints `listening <url>`, then on
 * SIGTERM `received <requests> <bytes>` and exits.
 */
import { startOtlpReceiver } from "../test/helpers/otlp-receiver.ts";

const receiver = await startOtlpReceiver();
console.log(`listening ${receiver.url}`);
process.once("SIGTERM", () => {
  process.stdout.write(`received ${receiver.requests} ${receiver.bytes}\n`, () => process.exit(0));
});
