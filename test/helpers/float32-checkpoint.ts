/**
 * A Hugging Face checkpoint converted by the platform and served as `tiny-hf` by a real gateway and
 * llama.cpp worker in this process, with `runtime.dtype: float32`: what tests that compare the
 * platform's log-likelihoods with `transformers` need (llama.cpp's default float16 KV cache alone
 * moves them by up to 2e-2). Its own Redis and data directory, removed by `stop`. LoRA adapters
 * registered on tiny-hf@v1 are served as `tiny-hf:<adapter>`.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DeploymentConfig } from "../../src/contracts/deployment.ts";
import { deployEndpoint, getEndpoint } from "../../src/endpoints/store.ts";
import { type RunningGateway, startGateway } from "../../src/gateway/server/app.ts";
import { createApiKey } from "../../src/keys/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { convertCheckpoint } from "../../src/formats/convert/index.ts";
import { importModel } from "../../src/models/import.ts";
import { loadSettings, type Settings } from "../../src/settings/index.ts";
import { openStore } from "../../src/storage/index.ts";
import { adapterCacheDir, ReplicaAdapters } from "../../workers/adapters.ts";
import { loadEngine } from "../../workers/engines/index.ts";
import { startWorker } from "../../workers/worker.ts";
import { privateRedis } from "./redis.ts";

export type ServedCheckpoint = {
  gateway: RunningGateway;
  /** An admin key of the install's own organization. */
  key: string;
  /** Its data directory (removed by `stop`): room for a test's own files too. */
  dataDir: string;
  /** The gateway's Redis and settings, for tests that run more beside it (an evaluation coordinator, say). */
  ctl: Control;
  settings: Settings;
  stop: () => Promise<void>;
};

/** `env`: further settings (PLATFORM_STORAGE_ROOTS, say); `<data dir>` in a value is replaced by the data directory. */
export async function serveFloat32Checkpoint(
  checkpoint: string,
  replicaId: string,
  env: Record<string, string> = {},
): Promise<ServedCheckpoint> {
  const redis = await privateRedis();
  const dataDir = await mkdtemp(join(tmpdir(), "platform-f32-"));
  const extra = Object.fromEntries(Object.entries(env).map(([k, v]) => [k, v.replaceAll("<data dir>", dataDir)]));
  const settings = { ...loadSettings({ PLATFORM_DATA_DIR: dataDir, ...extra }), redisUrl: redis.url };
  const ctl = connectControl(redis.url, settings.prefix);
  const key = (await createApiKey(ctl, "admin", "admin")).key;
  const gguf = join(dataDir, "model.gguf");
  await convertCheckpoint(checkpoint, gguf);
  const model = await importModel(
    { ctl, artifacts: openStore(settings.artifactsUrl), scratchDir: join(dataDir, "tmp") },
    { name: "tiny-hf", framework: "llamacpp", source: gguf },
  );
  await deployEndpoint(
    ctl,
    DeploymentConfig.parse({
      model: { name: "tiny-hf" },
      runtime: { dtype: "float32" },
      resources: { parallel: 1, cpu: 1 },
    }),
  );
  const endpoint = await getEndpoint(ctl, "tiny-hf");
  // Adapters registered on tiny-hf@v1 (docs/adapters.md) are served too, as `tiny-hf:<adapter>`.
  const adapters = new ReplicaAdapters({
    ctl,
    store: openStore(settings.artifactsUrl),
    cacheDir: adapterCacheDir(dataDir),
    replicaId,
    endpoint,
    model,
    modelPath: () => gguf,
  });
  const worker = startWorker({ ctl, endpoint, replicaId, adapters, loadEngine: () => loadEngine(endpoint, gguf) });
  await worker.ready;
  const gateway = await startGateway({ ctl, settings, host: "127.0.0.1", port: 0 });
  return {
    gateway,
    key,
    dataDir,
    ctl,
    settings,
    stop: async () => {
      await gateway.close();
      await worker.drain({ deadlineMs: 0 });
      await ctl.redis.quit();
      await redis.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
