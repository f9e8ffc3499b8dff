#!/usr/bin/env node
// Bundles the web dashboard (src/dashboard/) into dist/dashboard/, which the gateway serves
// at /dashboard. Runs as npm's `prepare` (so `npm ci` builds it) and as `npm run build:dashboard`.
// The bundle is a build output, never committed. With `--optional` (prepare), a missing esbuild
// (an `npm ci --omit=dev` install) or missing sources is a note, not a failure: the gateway then
// answers /dashboard with a 503 saying how to build it.
import { copyFile, mkdir, rm } from "node:fs/promises";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const src = `${root}src/dashboard/`;
const out = `${root}dist/dashboard/`;
const optional = process.argv.includes("--optional");

let esbuild;
try {
  esbuild = await import("esbuild");
} catch {
  if (optional) {
    console.log(
      "build-dashboard: esbuild is not installed (production install); /dashboard will answer 503 until `npm run build:dashboard`",
    );
    process.exit(0);
  }
  throw new Error("esbuild is not installed: run `npm ci` first");
}
if (!existsSync(`${src}main.tsx`)) {
  if (optional) process.exit(0);
  throw new Error(`no dashboard sources in ${src}`);
}

await rm(out, { recursive: true, force: true });
await mkdir(out, { recursive: true });
await esbuild.build({
  entryPoints: [`${src}main.tsx`],
  outfile: `${out}app.js`,
  bundle: true,
  format: "esm",
  target: "es2022",
  minify: true,
  sourcemap: true,
  jsx: "automatic",
  jsxImportSource: "preact",
  legalComments: "none",
  logLevel: "warning",
});
await copyFile(`${src}index.html`, `${out}index.html`);
await copyFile(`${src}style.css`, `${out}style.css`);
console.log(`build-dashboard: wrote ${out}`);
