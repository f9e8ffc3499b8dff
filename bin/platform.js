#!/usr/bin/env node
// The CLI runs the TypeScript sources directly (Node 24 strips types), so there is no build step.
const [major] = process.versions.node.split(".").map(Number);
if (major < 24) {
  console.error(
    `platform needs Node 24 or newer (this is Node ${process.versions.node}).\n` +
      "Run it through npm, which uses the Node 24 installed by `npm ci`: `npx platform ...`",
  );
  process.exit(1);
}
// `--version` alone answers without loading the CLI (scripts and health checks call it often).
const args = process.argv.slice(2);
if (args.length === 1 && (args[0] === "--version" || args[0] === "-v")) {
  const { readFileSync } = await import("node:fs");
  console.log(JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")).version);
} else {
  // Compiled code (type-stripped TypeScript included) is cached on disk, in the OS temp dir unless
  // NODE_COMPILE_CACHE names another: later starts of every role, above all each new replica, skip
  // the compiling (a worker: ~30% sooner ready, ~25 MiB less resident; docs/performance.md). Where
  // the directory cannot be written it is simply off.
  const { enableCompileCache } = await import("node:module");
  enableCompileCache?.();
  await import("../src/cli/main.ts");
}
