/**
 * The `platform` command: one module per command group, loaded only when its
 * command runs. Loading every group costs about a second (the gateway, the
 * Kubernetes client, node-llama-cpp); `platform --version` or
 * `inference status` need none of that.
 */
import { Command, CommanderError } from "commander";
import { PLATFORM_VERSION } from "../contracts/version.ts";
import { CliError } from "./common/errors.ts";

type Register = (program: Command) => void;

/** Top-level command → the module that registers it (the roles together). */
const GROUPS: Record<string, () => Promise<Register>> = {
  up: async () => (await import("./up.ts")).registerUp,
  training: async () => (await import("./training.ts")).registerTraining,
  inference: async () => (await import("./inference.ts")).registerInference,
  keys: async () => (await import("./keys.ts")).registerKeys,
  auth: async () => (await import("./auth.ts")).registerAuth,
  orgs: async () => (await import("./orgs.ts")).registerOrgs,
  proto: async () => (await import("./protos.ts")).registerProtos,
  publish: async () => (await import("./publish.ts")).registerPublish,
  registry: async () => (await import("./image-registry.ts")).registerImageRegistry,
  images: async () => (await import("./image-list.ts")).registerImages,
  usage: async () => (await import("./usage.ts")).registerUsage,
  init: async () => (await import("./init.ts")).registerInit,
  service: async () => (await import("./service.ts")).registerService,
  "dev-center": async () => (await import("./dev-center/index.ts")).registerDevCenter,
  doctor: async () => (await import("./doctor/index.ts")).registerDoctor,
  engine: async () => (await import("./engine.ts")).registerEngine,
  gateway: async () => (await import("./roles.ts")).registerRoles,
  worker: async () => (await import("./roles.ts")).registerRoles,
  scaler: async () => (await import("./roles.ts")).registerRoles,
  trainer: async () => (await import("./trainer-role.ts")).registerTrainerRole,
};

const program = new Command()
  .name("platform")
  .description("self-hosted model platform: register models, serve them behind an OpenAI-compatible API")
  .version(PLATFORM_VERSION, "-v, --version")
  .enablePositionalOptions()
  .showHelpAfterError()
  .exitOverride();

/**
 * The groups this command line needs: the named command's own; none for a bare `--version`;
 * all of them otherwise (help, or a command that does not exist, so the error lists the real ones).
 */
function groupsFor(args: string[]): (() => Promise<Register>)[] {
  const word = args.find((a) => !a.startsWith("-"));
  const named = word === undefined ? undefined : GROUPS[word];
  if (named) return [named];
  if (word === undefined && args.some((a) => a === "-v" || a === "--version")) return [];
  return Object.values(GROUPS);
}

const registered = new Set<Register>();
for (const load of groupsFor(process.argv.slice(2))) {
  const register = await load();
  if (registered.has(register)) continue;
  registered.add(register);
  register(program);
}

try {
  await program.parseAsync(process.argv);
} catch (e) {
  if (e instanceof CommanderError) process.exit(e.exitCode === 0 ? 0 : 2);
  if (e instanceof CliError) {
    console.error(e.plain ? e.message : `error: ${e.message}`);
    process.exit(e.exitCode);
  }
  console.error(`error: ${e instanceof Error ? e.message : String(e)}`);
  // Domain code the CLI calls refuses bad input as a 400, as it would to an HTTP client: exit 2 too.
  const { PlatformError } = await import("../contracts/errors.ts");
  process.exit(e instanceof PlatformError && e.status === 400 ? 2 : 1);
}
