import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
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
  },
});
