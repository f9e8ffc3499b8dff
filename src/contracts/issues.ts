/** How a zod validation failure is told to a person: each field with what is wrong, on one line. */
import type { z } from "zod";

/**
 * Turns zod issues into one line per field, e.g.
 * `resources.memory: expected "<n>Gi" (or "<n>Mi")`.
 */
export function describeIssues(error: z.ZodError): string {
  return error.issues
    .map((issue) => {
      const path = issue.path.join(".") || "(document)";
      if (issue.code === "unrecognized_keys") {
        return `${path === "(document)" ? "" : `${path}: `}unknown field(s) ${issue.keys.map((k) => `"${k}"`).join(", ")}`;
      }
      return `${path}: ${issue.message}`;
    })
    .join("; ");
}
