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
  },
});
