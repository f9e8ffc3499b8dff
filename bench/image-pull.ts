/**
 * `npm run bench:image-pull`: what the image cache (scaler/container-images/pull.ts) saves a replica that starts
 * from a published image. A pull by digest through skopeo from a local registry, into an empty
 * cache, against the same pull answered from the cache (no skopeo run at all), rounds taking
 * turns, medians, as a ratio measured in the same run. test/e2e/image-runner.test.ts proves the
 * cached pull needs no skopeo; how fast it is belongs here. Needs the image tools (`.ci/run`
 * installs them); says what is missing otherwise. Writes bench/results/images.json.
 */
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { pullImage } from "../scaler/container-images/pull.ts";
import {
  imageToolsUnavailable,
  privateBuildah,
  pushBaseImage,
  startRegistry,
  withStdin,
} from "../test/helpers/registry.ts";
import { median } from "./measure.ts";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
/** The cached pull is a few file reads; a tenth of a registry round trip through skopeo is generous. */
const TARGET = 0.1;
const USER = "bench";
// Only for the throwaway registry this bench starts.
const PASSWORD = `pw-${process.pid}-${Date.now()}`;

const unavailable = imageToolsUnavailable();
if (unavailable) {
  console.log(`bench:image-pull skipped: ${unavailable}`);
  process.exit(0);
}

const run = promisify(execFile);
const loadAtStart = loadavg();
const registry = await startRegistry({ [USER]: PASSWORD });
const buildah = await privateBuildah();
const work = await mkdtemp(join(tmpdir(), "platform-bench-images-"));
try {
  const reference = await pushBaseImage(buildah, registry, USER, PASSWORD, "node");
  await withStdin(
    "buildah",
    ["login", "--tls-verify=false", "--username", USER, "--password-stdin", registry.host],
    `${PASSWORD}\n`,
    buildah.env,
  );
  const authFile = join(buildah.env.XDG_RUNTIME_DIR as string, "containers", "auth.json");
  const inspected = await run(
    "skopeo",
    ["inspect", "--tls-verify=false", "--authfile", authFile, `docker://${reference}`],
    { env: buildah.env },
  );
  const digest = (JSON.parse(inspected.stdout) as { Digest: string }).Digest;
  const repository = reference.slice(0, reference.lastIndexOf(":"));

  const cold: number[] = [];
  const cached: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const cacheDir = join(work, `cache-${round}`);
    let t0 = performance.now();
    await pullImage({ repository, digest, cacheDir, authFile });
    cold.push(performance.now() - t0);
    t0 = performance.now();
    await pullImage({ repository, digest, cacheDir, authFile, skopeo: "/nonexistent/skopeo" });
    cached.push(performance.now() - t0);
  }
  const results = {
    rounds: ROUNDS,
    pull_ms: { skopeo_p50: median(cold), cached_p50: median(cached) },
    ratio_cached_to_skopeo: median(cached) / median(cold),
    target: TARGET,
    met: median(cached) / median(cold) <= TARGET,
    load_average: { start: loadAtStart[0], end: loadavg()[0] },
  };
  const out = new URL("./results/", import.meta.url);
  await mkdir(out, { recursive: true });
  await writeFile(new URL("images.json", out), `${JSON.stringify(results, null, 2)}\n`);
  console.log(
    `image pull by digest, median of ${ROUNDS}: through skopeo ${results.pull_ms.skopeo_p50.toFixed(0)} ms, ` +
      `from the cache ${results.pull_ms.cached_p50.toFixed(1)} ms; ratio ${results.ratio_cached_to_skopeo.toFixed(3)} ` +
      `(target ≤ ${TARGET}: ${results.met ? "met" : "NOT met"})`,
  );
  console.log("written bench/results/images.json");
} finally {
  await registry.stop();
  await buildah.remove();
  await rm(work, { recursive: true, force: true });
}
