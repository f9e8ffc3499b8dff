/**
 * A newcomer's first fine-tune (docs/fine-tuning.md, "The trainer's Python"): every message about a
 * trainer without its Python names the one command that makes it (`npm run setup:python`), and that
 * command, run on a venv that has everything, returns at once with the venv's python and installs
 * nothing. It never installs here: where no reference venv exists, that part skips, saying so.
 */
import { execFile } from "node:child_process";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { describeOffer } from "../../workers/trainer/gpu.ts";
import { referencePython } from "../helpers/models.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";
import { runCli } from "../helpers/stack.ts";

const run = promisify(execFile);
const ROOT = resolve(import.meta.dirname, "../..");
const python = referencePython();
/** The machine's python3 (no torch): what a newcomer's trainer runs before the setup. */
const BARE = "python3";

let dir: string;
let redis: PrivateRedis;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "platform-setup-python-"));
  redis = await privateRedis();
});

afterAll(async () => {
  await redis?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("the trainer's Python: one command makes it, and every message names it", () => {
  it("`platform up`'s trainer line names it when its Python has no torch", () => {
    const line = describeOffer({ torch: null, cuda: false, devices: 0, name: null }, false);
    expect(line).toContain("the trainer's Python has no torch");
    expect(line).toContain("`npm run setup:python`");
    expect(line).toContain("PLATFORM_TRAINER_PYTHON");
    expect(line).toMatch(/jobs fail until it does$/);
  });

  it("`platform doctor`'s trainer check names it", async () => {
    const env = { ...process.env, PLATFORM_TRAINER_PYTHON: BARE, PLATFORM_CONFIG_DIR: join(dir, "config") };
    const doctor = await runCli(["doctor", "--json"], env, dir);
    const trainer = (
      JSON.parse(doctor.stdout) as { checks: { id: string; status: string; fix?: string }[] }
    ).checks.find((c) => c.id === "trainer");
    // Not required (a machine that never trains needs none): a warning, with the fix.
    expect(trainer?.status, doctor.stderr).toBe("warn");
    expect(trainer?.fix).toContain("`npm run setup:python`");
  });

  it("`platform trainer --gpu` names it when its Python has no torch", async () => {
    const env = { ...process.env, PLATFORM_TRAINER_PYTHON: BARE, REDIS_URL: redis.url, PLATFORM_DATA_DIR: dir };
    const trainer = await runCli(["trainer", "--gpu"], env, dir);
    expect(trainer.code).toBe(1);
    expect(trainer.stderr).toContain("this trainer's Python has no torch");
    expect(trainer.stderr).toContain("`npm run setup:python`");
  });

  it.skipIf(!python)(
    "returns at once on a venv that has everything, installing nothing (needs .venv-ref)",
    async () => {
      const venv = dirname(dirname(python as string));
      const logs = ["install.log", "install-lmeval.log", "install-diffusers.log"].map((f) => join(venv, f));
      const before = await Promise.all(
        logs.map((f) =>
          stat(f).then(
            (s) => s.mtimeMs,
            () => null,
          ),
        ),
      );
      const site = await run(python as string, ["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]);
      const packages = site.stdout.trim();
      const listed = (await stat(packages)).mtimeMs;
      // Through npm, as the docs give it: the venv's python, on stdout alone.
      const { stdout, stderr } = await run("npm", ["run", "-s", "setup:python", "--", venv], { cwd: ROOT });
      expect(stdout.trim()).toBe(join(await realVenv(venv), "bin", "python"));
      expect(stderr).toBe("");
      expect(
        await Promise.all(
          logs.map((f) =>
            stat(f).then(
              (s) => s.mtimeMs,
              () => null,
            ),
          ),
        ),
      ).toEqual(before);
      expect((await stat(packages)).mtimeMs).toBe(listed);
    },
  );
});

async function realVenv(venv: string): Promise<string> {
  return (await run("realpath", [venv])).stdout.trim();
}
