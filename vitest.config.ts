/**
 * The test tiers (docs/testing.md): `unit` is pure and fast; `integration` and `e2e` start real
 * Redis, processes and servers, and share the slow settings below. `npm test` runs all three.
 */
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // Suites start real processes (Redis, workers, gateways): give them room, and
    // run files in separate processes so one suite's children never leak into another.
    pool: "forks",
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Two cores: more parallel files only make llama.cpp workers fight for CPU.
    maxWorkers: 2,
    // A loaded CI machine can take seconds to reach a state a poll waits for; the 1 s default
    // made the dashboard test fail there. A poll that truly never holds still fails, later.
    expect: { poll: { timeout: 15_000, interval: 100 } },
    projects: [
      {
        // Pure tests: no Redis, no child processes, no servers listening. Threads start faster
        // than forks, and nothing here leaves children behind; workers keep their modules loaded
        // across files (isolate: false), which halves the tier's CPU time.
        extends: true,
        test: {
          name: "unit",
          include: ["test/unit/**/*.test.ts"],
          setupFiles: ["test/unit-tier.ts"],
          pool: "threads",
          isolate: false,
        },
      },
      {
        extends: true,
        test: { name: "integration", include: ["test/integration/**/*.test.ts", "test/fixtures/**/*.test.ts"] },
      },
      {
        // One `platform up` the files share unless they need their own (test/helpers/shared-stack.ts).
        extends: true,
        test: { name: "e2e", include: ["test/e2e/**/*.test.ts"], globalSetup: ["test/e2e-stack.ts"] },
      },
    ],
  },
});
