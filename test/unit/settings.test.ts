/** The settings module (src/settings/): each section's defaults, and a bad value stopping the load with the variable's name. */
import { homedir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadCliSettings } from "../../src/settings/cli.ts";
import { loadSettings } from "../../src/settings/index.ts";

describe("loadSettings", () => {
  it("gives every section its default from an empty environment", () => {
    const s = loadSettings({});
    expect(s).toMatchObject({
      redisUrl: undefined,
      prefix: "platform",
      dataDir: join(homedir(), ".local", "share", "platform"),
      requestTimeoutMs: 600_000,
      drainTimeoutMs: 30_000,
      maxRequestBytes: 2 * 1024 * 1024,
    });
    expect(s.queue).toEqual({ redisServer: "redis-server", redisRestarts: 5, redisRestartWindowMs: 60_000 });
    expect(s.admission).toEqual({ maxQueueDepth: 1000, maxQueueWaitMs: 60_000, laneWaitMs: 500 });
    expect(s.heartbeats).toEqual({ intervalMs: 1000 });
    expect(s.worker).toEqual({ exitWithParent: false, standby: true, metrics: false });
    expect(s.vllm).toEqual({ bin: "vllm", startTimeoutMs: 15 * 60_000 });
    expect(s.structured).toEqual({
      limits: {
        depth: 10,
        properties: 5000,
        enumValues: 1000,
        characters: 120_000,
        largeEnumCharacters: 15_000,
        tools: 128,
      },
      grammarTimeoutMs: 2000,
    });
    expect(s.kubernetes).toEqual({
      configMapName: "platform-config",
      secretName: "platform-secrets",
      redisPasswordSecret: { name: "platform-redis", key: "password" },
    });
    expect(s.storage).toEqual({ s3: { region: "us-east-1", forcePathStyle: false } });
    expect(s.sources).toMatchObject({
      allowHttp: false,
      allowPrivate: false,
      allowedCidrs: [],
      totalTimeoutMs: 4 * 3600_000,
      idleTimeoutMs: 60_000,
      hfEndpoint: "https://huggingface.co",
    });
    expect(s.cli).toEqual({
      credentialsFile: join(homedir(), ".config", "platform", "credentials.json"),
      baseUrl: undefined,
      apiKey: undefined,
      upload: undefined,
    });
  });

  it("reads each section's variables", () => {
    const s = loadSettings({
      XDG_DATA_HOME: "/xdg/data",
      PLATFORM_REDIS_SERVER: "/opt/redis/bin/redis-server",
      PLATFORM_HEARTBEAT_MS: "250",
      PLATFORM_EXIT_WITH_PARENT: "1",
      PLATFORM_STANDBY_WORKER: "0",
      VLLM_BIN: "/venv/bin/vllm",
      PLATFORM_VLLM_START_TIMEOUT_MS: "60000",
      POD_NAME: "scaler-0",
      POD_NAMESPACE: "ml",
      AWS_REGION: "eu-west-3",
      PLATFORM_CONFIG_DIR: "/cfg",
      PLATFORM_BASE_URL: "http://gw:8000",
      PLATFORM_API_KEY: "sk-test",
      PLATFORM_CLI_UPLOAD: "never",
      PLATFORM_MAX_SCHEMA_DEPTH: "4",
      PLATFORM_MAX_SCHEMA_PROPERTIES: "50",
      PLATFORM_MAX_SCHEMA_ENUM_VALUES: "20",
      PLATFORM_MAX_SCHEMA_CHARS: "3000",
      PLATFORM_MAX_SCHEMA_LARGE_ENUM_CHARS: "500",
      PLATFORM_MAX_TOOLS: "16",
      PLATFORM_GRAMMAR_TIMEOUT_MS: "250",
    });
    expect(s.dataDir).toBe("/xdg/data/platform");
    expect(s.structured).toEqual({
      limits: { depth: 4, properties: 50, enumValues: 20, characters: 3000, largeEnumCharacters: 500, tools: 16 },
      grammarTimeoutMs: 250,
    });
    expect(s.queue.redisServer).toBe("/opt/redis/bin/redis-server");
    expect(s.heartbeats.intervalMs).toBe(250);
    expect(s.worker).toEqual({ exitWithParent: true, standby: false, metrics: false });
    expect(s.vllm).toEqual({ bin: "/venv/bin/vllm", startTimeoutMs: 60_000 });
    expect(s.kubernetes).toMatchObject({ podName: "scaler-0", podNamespace: "ml" });
    expect(s.storage.s3.region).toBe("eu-west-3");
    expect(s.cli).toEqual({
      credentialsFile: "/cfg/credentials.json",
      baseUrl: "http://gw:8000",
      apiKey: "sk-test",
      upload: "never",
    });
    // Empty counts as unset where it always has.
    expect(loadSettings({ VLLM_BIN: "" }).vllm.bin).toBe("vllm");
    expect(loadSettings({ XDG_CONFIG_HOME: "/xdg/cfg" }).cli.credentialsFile).toBe(
      "/xdg/cfg/platform/credentials.json",
    );
  });

  const bad: [section: string, variable: string, value: string][] = [
    ["core", "PLATFORM_REQUEST_TIMEOUT_MS", "soon"],
    ["core", "PLATFORM_PREFIX", "a prefix"],
    ["queue", "PLATFORM_REDIS_SERVER", ""],
    ["admission", "PLATFORM_MAX_QUEUE_DEPTH", "0"],
    ["admission", "PLATFORM_MAX_QUEUE_WAIT_MS", "a minute"],
    ["heartbeats", "PLATFORM_HEARTBEAT_MS", "-5"],
    ["worker", "PLATFORM_EXIT_WITH_PARENT", "yes"],
    ["vllm", "PLATFORM_VLLM_START_TIMEOUT_MS", "15m"],
    ["kubernetes", "PLATFORM_WORKER_REDIS_SECRET", "no-key"],
    ["kubernetes", "PLATFORM_WORKER_GRACE_SECONDS", "soon"],
    ["storage", "AWS_ENDPOINT_URL_S3", "not a url"],
    ["storage", "PLATFORM_S3_FORCE_PATH_STYLE", "yes"],
    ["sources", "PLATFORM_SOURCES_ALLOW_PRIVATE", "maybe"],
    ["cli", "PLATFORM_CLI_UPLOAD", "sometimes"],
    ["cli", "PLATFORM_BASE_URL", "gw:8000"],
    ["structured", "PLATFORM_MAX_SCHEMA_ENUM_VALUES", "many"],
    ["structured", "PLATFORM_MAX_SCHEMA_DEPTH", "0"],
    ["structured", "PLATFORM_MAX_TOOLS", "200"],
    ["structured", "PLATFORM_GRAMMAR_TIMEOUT_MS", "2s"],
    ["tokens", "PLATFORM_TOKEN_TTL_MS", "12h"],
    ["tokens", "PLATFORM_REFRESH_TOKEN_TTL_MS", "0"],
  ];
  it.each(bad)("%s: a bad %s stops the load, naming the variable", (_section, variable, value) => {
    expect(() => loadSettings({ [variable]: value })).toThrow(new RegExp(`^invalid environment: .*${variable}: `));
  });

  it("reads the tokens section: 12 h tokens refreshable for 30 days, and a session no shorter than its token", () => {
    expect(loadSettings({}).tokens).toEqual({ ttlMs: 12 * 3_600_000, refreshTtlMs: 30 * 86_400_000 });
    expect(loadSettings({ PLATFORM_TOKEN_TTL_MS: "60000", PLATFORM_REFRESH_TOKEN_TTL_MS: "600000" }).tokens).toEqual({
      ttlMs: 60_000,
      refreshTtlMs: 600_000,
    });
    expect(() => loadSettings({ PLATFORM_TOKEN_TTL_MS: "600000", PLATFORM_REFRESH_TOKEN_TTL_MS: "60000" })).toThrow(
      /PLATFORM_REFRESH_TOKEN_TTL_MS: expected at least PLATFORM_TOKEN_TTL_MS \(600000\)/,
    );
  });

  it("says what form is expected", () => {
    expect(() => loadSettings({ PLATFORM_VLLM_START_TIMEOUT_MS: "15m" })).toThrow(
      /PLATFORM_VLLM_START_TIMEOUT_MS: expected a whole number of milliseconds/,
    );
    expect(() => loadSettings({ PLATFORM_CLI_UPLOAD: "sometimes" })).toThrow(
      /PLATFORM_CLI_UPLOAD: expected auto, always or never/,
    );
    expect(() => loadSettings({ PLATFORM_EXIT_WITH_PARENT: "yes" })).toThrow(
      /PLATFORM_EXIT_WITH_PARENT: expected "true" or "false"/,
    );
    expect(() => loadSettings({ AWS_ACCESS_KEY_ID: "only-id" })).toThrow(/AWS_SECRET_ACCESS_KEY: set both/);
    expect(() => loadSettings({ PLATFORM_MAX_TOOLS: "200" })).toThrow(
      /PLATFORM_MAX_TOOLS: expected at most 128, the queue contract's bound/,
    );
  });

  it("reports every bad variable at once, whatever their sections", () => {
    expect(() =>
      loadSettings({
        PLATFORM_HEARTBEAT_MS: "x",
        VLLM_BIN: "vllm",
        PLATFORM_WORKER_GRACE_SECONDS: "x",
        PLATFORM_CLI_UPLOAD: "x",
      }),
    ).toThrow(/PLATFORM_HEARTBEAT_MS: .*PLATFORM_WORKER_GRACE_SECONDS: .*PLATFORM_CLI_UPLOAD: /);
  });
});

describe("loadCliSettings", () => {
  it("validates the cli section alone, so a server variable in a user's shell never stops a client command", () => {
    expect(loadCliSettings({ PLATFORM_HEARTBEAT_MS: "not a number", PLATFORM_API_KEY: "k" }).apiKey).toBe("k");
    expect(() => loadCliSettings({ PLATFORM_CLI_UPLOAD: "sometimes" })).toThrow(/PLATFORM_CLI_UPLOAD/);
  });
});
