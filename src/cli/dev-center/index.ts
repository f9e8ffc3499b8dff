/**
 * `platform dev-center`: deploying and running the organization's services (docs/services.md),
 * one module per subgroup: service, rollout, logs, secrets and env (vars.ts).
 */
import type { Command } from "commander";
import { registerLogs } from "./logs.ts";
import { registerRollout } from "./rollout.ts";
import { registerServiceCommands } from "./service.ts";
import { registerVars } from "./vars.ts";

export function registerDevCenter(program: Command): void {
  const devCenter = program
    .command("dev-center")
    .description("deploy services from published images, roll them out, read their logs, set their env and secrets");
  registerServiceCommands(devCenter);
  registerRollout(devCenter);
  registerLogs(devCenter);
  registerVars(devCenter);
}
