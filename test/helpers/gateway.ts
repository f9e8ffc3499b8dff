/**
 * An in-process gateway on a private Redis, with the tiny model registered and deployed but no
 * replica running: whatever the gateway admits waits in the queue until a test serves it. The
 * setup gateway, rate-limit and bounds tests share.
 */
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import type { RegisteredVersion } from "../../src/models/record.ts";
import { deployEndpoint } from "../../src/endpoints/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { importModel } from "../../src/models/import.ts";
import { loadSettings, type Settings } from "../../src/settings/index.ts";
import { openStore } from "../../src/storage/index.ts";
import { tinyModelPath } from "./models.ts";
import { type PrivateRedis, privateRedis } from "./redis.ts";

export type TinyGateway = {
  redis: PrivateRedis;
  ctl: Control;
  settings: Settings;
  gateway: RunningGateway;
  /** The registered tiny model's record (its GGUF summary included). */
  model: RegisteredVersion;
  /** Closes the gateway and the connection; stops Redis unless the test already did. */
  stop: () => Promise<void>;
};

/**
 * `env`: settings variables beside PLATFORM_DATA_DIR; `settings`: overrides of the parsed settings; `contextLength`: the tiny
 * model's window; `embed`: also register and deploy the same model as "tiny-embed" with the embed task (a model serves one task).
 */
export async function startTinyGateway(
  options: { env?: Record<string, string>; settings?: Partial<Settings>; contextLength?: number; embed?: boolean } = {},
): Promise<TinyGateway> {
  const redis = await privateRedis();
  const dataDir = await mkdtemp(join(tmpdir(), "platform-gw-"));
  const settings: Settings = {
    ...loadSettings({ PLATFORM_DATA_DIR: dataDir, ...options.env }),
    redisUrl: redis.url,
    ...options.settings,
  };
  const ctl = connectControl(redis.url, settings.prefix);
  const source = await tinyModelPath(
    options.contextLength === undefined ? {} : { contextLength: options.contextLength },
  );
  const model = await importModel(
    { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(dataDir, "tmp") },
    { name: "tiny", framework: "llamacpp", source },
  );
  await deployEndpoint(ctl, DeploymentConfig.parse({ model: { name: "tiny" } }));
  if (options.embed) {
    await importModel(
      { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(dataDir, "tmp") },
      { name: "tiny-embed", framework: "llamacpp", source, task: "embed" },
    );
    await deployEndpoint(ctl, DeploymentConfig.parse({ model: { name: "tiny-embed" } }));
  }
  const gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });
  return {
    redis,
    ctl,
    settings,
    gateway,
    model,
    stop: async () => {
      await gateway.close();
      await ctl.redis.quit().catch(() => undefined);
      await redis.stop();
    },
  };
}
