/** Zod pieces the settings sections share, so every variable reads and fails the same way. */
import { z } from "zod";
import { describeIssues } from "../contracts/issues.ts";
import { hideSecrets } from "./secrets.ts";

/** "true"/"false" (or 1/0): z.coerce.boolean would read "false" as true. */
export const flag = (fallback: boolean) =>
  z
    .enum(["true", "false", "1", "0", ""], { message: 'expected "true" or "false" (or 1/0)' })
    .default(fallback ? "true" : "false")
    .transform((v) => (v === "" ? fallback : v === "true" || v === "1"));
export const Flag = flag(false);

/** An empty variable counts as unset: compose files and Helm values often write `VAR=` for "none". */
export const optional = <T extends z.ZodType>(schema: T) =>
  z.preprocess((value) => (value === "" ? undefined : value), schema.optional());

/** A whole number of milliseconds above zero, with the variable's default. */
export const positiveMs = (fallback: number) =>
  z.coerce.number({ message: "expected a whole number of milliseconds" }).int().positive().default(fallback);

/**
 * The environment through one section's (or all sections') schema; every bad variable named at
 * once, and no secret's value in the message (secrets.ts).
 */
export function parse<T extends z.ZodType>(schema: T, env: NodeJS.ProcessEnv): z.infer<T> {
  const parsed = schema.safeParse(env);
  if (!parsed.success) throw new Error(hideSecrets(`invalid environment: ${describeIssues(parsed.error)}`, env));
  return parsed.data;
}
