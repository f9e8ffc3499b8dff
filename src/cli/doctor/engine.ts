/**
 * Doctor's llama.cpp check: which binary a CPU replica on this machine loads (PLATFORM_LLAMA_BUILD,
 * workers/engines/llamacpp-binary.ts), without loading it. Not required: the prebuilt binary serves,
 * only slower at prompts; a warning says how to build one for this CPU.
 */
import { loadSettings } from "../../settings/index.ts";
import { type DoctorCheck, fail, ok, warn } from "./check.ts";

export const engineCheck: DoctorCheck = {
  id: "llama-binary",
  name: "llama.cpp binary",
  required: false,
  run: async () => {
    const settings = loadSettings().engine;
    const { chooseBinary } = await import("../../../workers/engines/llamacpp-binary.ts");
    const choice = await chooseBinary(settings).catch((e: unknown) => ({ error: (e as Error).message }));
    if ("error" in choice) return fail(choice.error, "`platform engine build`, or PLATFORM_LLAMA_BUILD=auto");
    const details = { setting: settings.llamaBuild, binary: choice.binary, path: choice.path };
    if (choice.binary === "prebuilt" && settings.llamaBuild === "auto")
      return warn(
        `CPU replicas load ${choice.note.replace(/ \(.*$/, "")}: prompts run slower than a build for this CPU`,
        "`platform engine build` (once; cmake, git and a C++ compiler)",
        details,
      );
    return ok(choice.note, details);
  },
};
