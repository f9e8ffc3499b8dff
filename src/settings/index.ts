/**
 * Process settings: every environment variable the platform reads, in sections, validated
 * together once at start-up. A bad value stops the process with the variable's name and the
 * expected form; modules get the typed values passed down and never read the environment.
 */
import { z } from "zod";
import { type CliSettings, cliSettings, cliShape } from "./cli.ts";
import { parse } from "./parse.ts";
import { type CoreSettings, coreSettings, coreShape } from "./core.ts";
import { type KubernetesSettings, kubernetesSettings, kubernetesShape } from "./kubernetes.ts";
import type { LoggingSettings } from "../telemetry/log.ts";
import { loggingSettings, loggingShape } from "./logging.ts";
import { type MetricsSettings, metricsSettings, metricsShape } from "./metrics.ts";
import {
  type AdmissionSettings,
  type HeartbeatSettings,
  type QueueSettings,
  queueSections,
  queueShape,
  type WorkerSettings,
} from "./queue.ts";
import { type SourcePolicy, sourcesSettings, sourcesShape } from "./sources.ts";
import { checkSignin, type SigninSettings, signinSettings, signinShape } from "./signin.ts";
import { checkStorage, type StorageSettings, storageSettings, storageShape } from "./storage.ts";
import { type StructuredSettings, structuredSettings, structuredShape } from "./structured.ts";
import { checkTokens, type TokenSettings, tokenSettings, tokensShape } from "./tokens.ts";
import { type ProtoSettings, protoSettings, protosShape } from "./protos.ts";
import { type RegistryTokenSettings, registryTokenSettings, registryTokenShape } from "./registry-token.ts";
import { type RegistryPolicy, registriesSettings, registriesShape } from "./registries.ts";
import { type ServicesSettings, servicesSettings, servicesShape } from "./services.ts";
import { type FineTuningSettings, fineTuningSettings, fineTuningShape } from "./finetuning.ts";
import type { TracingSettings } from "../telemetry/tracing-contract.ts";
import { tracingSettings, tracingShape } from "./tracing.ts";
import { type VllmSettings, vllmSettings, vllmShape } from "./vllm.ts";
import { type EngineSettings, engineSettings, engineShape } from "./engine.ts";
import { type PicturesSettings, picturesSettings, picturesShape } from "./pictures.ts";
import { type ResponsesSettings, responsesSettings, responsesShape } from "./responses.ts";
import { type TenantSettings, tenantSettings, tenantsShape } from "./tenants.ts";

export type {
  AdmissionSettings,
  CliSettings,
  CoreSettings,
  EngineSettings,
  HeartbeatSettings,
  KubernetesSettings,
  LoggingSettings,
  MetricsSettings,
  ProtoSettings,
  RegistryPolicy,
  RegistryTokenSettings,
  ServicesSettings,
  FineTuningSettings,
  QueueSettings,
  SigninSettings,
  StorageSettings,
  StructuredSettings,
  TokenSettings,
  TracingSettings,
  VllmSettings,
  PicturesSettings,
  WorkerSettings,
};

export type Settings = CoreSettings & {
  /** What remote model sources may reach, how big and how slow they may be (PLATFORM_SOURCES_*, HF_*). */
  sources: SourcePolicy;
  /** The embedded Redis (PLATFORM_REDIS_SERVER). */
  queue: QueueSettings;
  /** PLATFORM_MAX_QUEUE_DEPTH, PLATFORM_MAX_QUEUE_WAIT_MS. */
  admission: AdmissionSettings;
  /** PLATFORM_HEARTBEAT_MS. */
  heartbeats: HeartbeatSettings;
  /** PLATFORM_EXIT_WITH_PARENT. */
  worker: WorkerSettings;
  /** PLATFORM_MAX_SCHEMA_*, PLATFORM_MAX_TOOLS, PLATFORM_GRAMMAR_TIMEOUT_MS. */
  structured: StructuredSettings;
  /** VLLM_BIN, PLATFORM_VLLM_START_TIMEOUT_MS. */
  vllm: VllmSettings;
  /** PLATFORM_LLAMA_BUILD, PLATFORM_ENGINE_DIR: which llama.cpp binary a CPU replica loads. */
  engine: EngineSettings;
  /** PLATFORM_IMAGES_PYTHON, PLATFORM_IMAGES_START_TIMEOUT_MS, PLATFORM_IMAGES_MAX_BATCH, PLATFORM_IMAGES_URL_TTL_MS. */
  pictures: PicturesSettings;
  responses: ResponsesSettings;
  /** PLATFORM_WORKER_*, PLATFORM_K8S_NAMESPACE, PLATFORM_GPU_TYPE_LABEL, POD_NAME, POD_NAMESPACE. */
  kubernetes: KubernetesSettings;
  /** AWS_*, PLATFORM_S3_FORCE_PATH_STYLE. */
  storage: StorageSettings;
  /** PLATFORM_TOKEN_TTL_MS, PLATFORM_REFRESH_TOKEN_TTL_MS. */
  tokens: TokenSettings;
  /** PLATFORM_MAX_PROTO_BYTES, PLATFORM_MAX_PROTO_PACKAGES, PLATFORM_MAX_PROTO_VERSIONS. */
  protos: ProtoSettings;
  /** PLATFORM_REGISTRY_TOKEN_KEY, PLATFORM_REGISTRY_TOKEN_ISSUER, PLATFORM_REGISTRY_TOKEN_TTL_MS. */
  registryToken: RegistryTokenSettings;
  /** Which image registries tenants may name, at which addresses, and whom the operator's pull credential serves. */
  registries: RegistryPolicy;
  /** PLATFORM_SECRETS_KEY, PLATFORM_IMAGE_CACHE_DIR, PLATFORM_IMAGE_PULL_AUTH_FILE, PLATFORM_ROLLOUT_DEADLINE_MS, PLATFORM_SERVICE_RUNTIME, PLATFORM_SERVICE_ALLOW_ROOT, PLATFORM_SERVICE_HOST_PORTS. */
  services: ServicesSettings;
  fineTuning: FineTuningSettings;
  /** PLATFORM_PUBLIC_URL, PLATFORM_OIDC_*. */
  signin: SigninSettings;
  /** PLATFORM_CONFIG_DIR, PLATFORM_BASE_URL, PLATFORM_API_KEY, PLATFORM_CLI_UPLOAD, BROWSER. */
  cli: CliSettings;
  /** OTEL_SDK_DISABLED, OTEL_TRACES_EXPORTER, OTEL_TRACES_SAMPLER[_ARG], OTEL_BSP_*, OTEL_SERVICE_NAME, OTEL_EXPORTER_OTLP_*. */
  tracing: TracingSettings;
  /** PLATFORM_LOG_FORMAT, PLATFORM_LOG_LEVEL. */
  logging: LoggingSettings;
  /** PLATFORM_METRICS_PORT, PLATFORM_METRICS_ON_API_PORT. */
  metrics: MetricsSettings;
  /** PLATFORM_RPC_MAX_MESSAGE_BYTES, PLATFORM_ORG_FILE_BYTES, PLATFORM_ORG_FILES, PLATFORM_FILE_TTL_S, PLATFORM_ORG_LOG_FOLLOWS, PLATFORM_ORG_RPM, PLATFORM_ORG_TPM, PLATFORM_ORG_CONCURRENCY. */
  tenants: TenantSettings;
};

/** One object, so one parse reports every bad variable at once rather than the first of each section. */
const Env = z
  .object({
    ...coreShape,
    ...sourcesShape,
    ...queueShape,
    ...structuredShape,
    ...vllmShape,
    ...engineShape,
    ...picturesShape,
    ...responsesShape,
    ...kubernetesShape,
    ...storageShape,
    ...tokensShape,
    ...protosShape,
    ...registryTokenShape,
    ...registriesShape,
    ...servicesShape,
    ...fineTuningShape,
    ...signinShape,
    ...cliShape,
    ...tracingShape,
    ...loggingShape,
    ...metricsShape,
    ...tenantsShape,
  })
  .superRefine((e, ctx) => {
    checkStorage(e, ctx);
    checkTokens(e, ctx);
    checkSignin(e, ctx);
  });

export function loadSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  const e = parse(Env, env);
  const core = coreSettings(e);
  return {
    ...core,
    sources: sourcesSettings(e, core.maxModelBytes),
    ...queueSections(e),
    structured: structuredSettings(e),
    vllm: vllmSettings(e),
    engine: engineSettings(e, core.dataDir),
    pictures: picturesSettings(e),
    responses: responsesSettings(e),
    kubernetes: kubernetesSettings(e),
    storage: storageSettings(e),
    tokens: tokenSettings(e),
    protos: protoSettings(e),
    registryToken: registryTokenSettings(e),
    registries: registriesSettings(e),
    services: servicesSettings(e, core.dataDir, e.POD_NAME !== undefined),
    fineTuning: fineTuningSettings(e),
    signin: signinSettings(e),
    cli: cliSettings(e),
    tracing: tracingSettings(e),
    logging: loggingSettings(e),
    metrics: metricsSettings(e),
    tenants: tenantSettings(e),
  };
}
