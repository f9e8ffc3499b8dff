// Writes schemas/platformrc.schema.json, the JSON Schema of `.platformrc.json` shipped with the CLI, from
// its zod schema (src/workspace/config.ts), formatted as Biome keeps it. test/unit/workspace.test.ts fails
// while the two differ: run `npm run schema:platformrc` after changing the zod schema.
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { platformrcJsonSchema } from "../src/workspace/config.ts";

const file = fileURLToPath(new URL("../schemas/platformrc.schema.json", import.meta.url));
writeFileSync(file, `${JSON.stringify(platformrcJsonSchema(), null, 2)}\n`);
execFileSync(fileURLToPath(new URL("../node_modules/.bin/biome", import.meta.url)), ["format", "--write", file], {
  stdio: "inherit",
});
console.log(`wrote ${file}`);
