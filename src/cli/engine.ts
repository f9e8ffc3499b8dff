/**
 * `platform engine build` and `platform engine status`: llama.cpp built for this machine's CPU,
 * which CPU replicas here then load in place of the prebuilt binary (workers/engines/
 * llamacpp-binary.ts; docs/engines.md, "A build for this CPU").
 */
import type { Command } from "commander";
import { loadSettings } from "../settings/index.ts";
import { CliError } from "./common/errors.ts";
import { printJson } from "./common/output.ts";

export function registerEngine(program: Command): void {
  const engine = program.command("engine").description("the llama.cpp binary CPU replicas on this machine load");
  engine
    .command("build")
    .description(
      "build llama.cpp for this CPU from node-llama-cpp's bundled source (no network; cmake, git and a C++ compiler; ~10-30 minutes, at the lowest CPU priority)",
    )
    .option("--json", "print the build's path and time as JSON")
    .option(
      "--server",
      "build llama-server instead, the decoder of PLATFORM_LLAMA_ENGINE=server (the same source; ~7-15 minutes)",
    )
    .action(async (opts: { json?: boolean; server?: boolean }) => {
      const settings = loadSettings().engine;
      const what = opts.server ? "llama-server" : "llama.cpp";
      if (!opts.json) console.error(`building ${what} for this CPU into ${settings.dir} (once; minutes)...`);
      const build = opts.server
        ? (await import("../../workers/engines/llama-server-build.ts")).buildLlamaServer(settings, (line) => {
            if (!opts.json) console.error(line);
          })
        : (await import("../../workers/engines/llamacpp-build.ts")).buildNative(settings);
      const built = await build.catch((e: unknown) => {
        throw new CliError((e as Error).message, 1);
      });
      if (opts.json) printJson(built);
      else console.log(`built ${what} ${built.llamaCpp} for this CPU in ${built.seconds} s: ${built.path}`);
    });
  engine
    .command("status")
    .description(
      "say which llama.cpp binary a CPU replica here loads (PLATFORM_LLAMA_BUILD) and where it decodes (PLATFORM_LLAMA_ENGINE), without loading either",
    )
    .option("--json", "print it as JSON")
    .action(async (opts: { json?: boolean }) => {
      const { chooseBinary } = await import("../../workers/engines/llamacpp-binary.ts");
      const settings = loadSettings().engine;
      const choice = await chooseBinary(settings).catch((e: unknown) => {
        throw new CliError((e as Error).message, 1);
      });
      const { decoderNote } = await import("../../workers/engines/llama-server-build.ts");
      const decoding = decoderNote(settings);
      if (opts.json) printJson({ setting: settings.llamaBuild, ...choice, engine: settings.llamaEngine, decoding });
      else console.log(`llama.cpp: ${choice.note}\ndecoding: ${decoding}`);
    });
}
