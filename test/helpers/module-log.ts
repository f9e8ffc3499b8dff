/**
 * Preloaded with `NODE_OPTIONS=--import <this file>` (and MODULE_LOG_DIR set): every Node process of a
 * stack writes its command line, then each OpenTelemetry package it resolves to `<MODULE_LOG_DIR>/<pid>.txt`, so a test
 * can tell which processes loaded the SDK. Synchronous hooks: they see `require` (prom-client's)
 * as well as `import`.
 */
import { appendFileSync } from "node:fs";
import { registerHooks } from "node:module";
import { join } from "node:path";

const dir = process.env.MODULE_LOG_DIR;
if (dir) {
  const file = join(dir, `${process.pid}.txt`);
  const seen = new Set<string>();
  // Every process gets a file, headed by its command line, even one that loads nothing of OpenTelemetry.
  appendFileSync(file, `# ${process.argv.slice(1).join(" ")}\n`);
  registerHooks({
    resolve(specifier, context, nextResolve) {
      const resolved = nextResolve(specifier, context);
      const m = /node_modules\/(@opentelemetry\/[^/]+)\//.exec(resolved.url);
      if (m && !seen.has(m[1] as string)) {
        seen.add(m[1] as string);
        appendFileSync(file, `${m[1]}\n`);
      }
      return resolved;
    },
  });
}
