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
    .action(async (opts: { json?: boolean }) => {
      const { buildNative } = await import("../../workers/engines/llamacpp-build.ts");
      const settings = loadSettings().engine;
      if (!opts.json) console.error(`building llama.cpp for this CPU into ${settings.dir} (once; minutes)...`);
      const built = await buildNative(settings).catch((e: unknown) => {
        throw new CliError((e as Error).message, 1);
      });
      if (opts.json) printJson(built);
      else console.log(`built llama.cpp ${built.llamaCpp} for this CPU in ${built.seconds} s: ${built.path}`);
    });
  engine
    .command("status")
    .description("say which llama.cpp binary a CPU replica here loads (PLATFORM_LLAMA_BUILD), without loading it")
    .option("--json", "print it as JSON")
    .action(async (opts: { json?: boolean }) => {
      const { chooseBinary } = await import("../../workers/engines/llamacpp-binary.ts");
      const settings = loadSettings().engine;
      const choice = await chooseBinary(settings).catch((e: unknown) => {
        throw new CliError((e as Error).message, 1);
      });
      if (opts.json) printJson({ setting: settings.llamaBuild, ...choice });
      else console.log(`llama.cpp: ${choice.note}`);
    });
}
