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
await import("../src/cli/main.ts");
