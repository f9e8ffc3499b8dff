/** Placeholder for the Python scaffold (another change provides it): keeps `service create` compiling. */
import { CliError } from "../errors.ts";
import type { Scaffolder } from "./types.ts";

export const scaffoldPython: Scaffolder = () => {
  throw new CliError("python scaffold: not built yet", 1);
};
