#!/usr/bin/env node
// Some registry mirrors (the one these machines use among them) only carry the
// platform builds of native packages for the platform they were filled from.
// `npm install` then leaves the other platforms' optional packages out of
// package-lock.json, and `npm ci` refuses the lock as "out of sync". This adds
// an entry for each such package, with the os/cpu npm needs to skip it on
// platforms it is not for; on its own platform npm fetches it by version.
// Run after any `npm install` that rewrites the lock: `npm run lock:complete`.
import { readFileSync, writeFileSync } from "node:fs";

const lockPath = new URL("../package-lock.json", import.meta.url);
const lock = JSON.parse(readFileSync(lockPath, "utf8"));
const packages = lock.packages;

const osOf = { darwin: "darwin", mac: "darwin", win32: "win32", win: "win32", linux: "linux" };
function platformOf(name) {
  const tail = name.split("/").pop();
  const parts = tail.split("-");
  const osPart = parts.find((p) => p in osOf);
  const cpu = parts.find((p) => ["x64", "arm64", "arm", "riscv64"].includes(p));
  if (!osPart || !cpu) return undefined;
  // Apple Silicon and Windows-on-ARM builds also run under x64 emulation hosts.
  const cpus = name.endsWith("mac-arm64-metal") || name.endsWith("win-arm64") ? ["arm64", "x64"] : [cpu];
  return { os: [osOf[osPart]], cpu: cpus };
}

let added = 0;
for (const [path, entry] of Object.entries(packages)) {
  for (const [dep, version] of Object.entries(entry.optionalDependencies ?? {})) {
    const depPath = `${path ? `${path}/` : ""}node_modules/${dep}`;
    const hoisted = `node_modules/${dep}`;
    if (packages[depPath] || packages[hoisted]) continue;
    const platform = platformOf(dep);
    if (!platform) continue;
    packages[hoisted] = { version, optional: true, ...platform };
    added++;
  }
}
lock.packages = Object.fromEntries(
  Object.entries(packages).sort(([a], [b]) => (a === "" ? -1 : b === "" ? 1 : a.localeCompare(b))),
);
writeFileSync(lockPath, `${JSON.stringify(lock, null, 2)}\n`);
console.log(`complete-lockfile: added ${added} platform entries`);
