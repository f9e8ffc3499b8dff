/** The kubernetes section: how `platform scaler --backend kubernetes` builds worker Deployments (deploy/base/scaler.yaml sets these). */
import { z } from "zod";
import type { Framework } from "../contracts/deployment.ts";

export const kubernetesShape = {
  PLATFORM_WORKER_IMAGE: z.string().min(1).optional(),
  PLATFORM_VLLM_WORKER_IMAGE: z.string().min(1).optional(),
  /** deploy/diffusers-worker.Dockerfile's image, for `framework: diffusers` endpoints. */
  PLATFORM_DIFFUSERS_WORKER_IMAGE: z.string().min(1).optional(),
  PLATFORM_K8S_NAMESPACE: z.string().min(1).optional(),
  PLATFORM_WORKER_CONFIGMAP: z.string().min(1).default("platform-config"),
  PLATFORM_WORKER_SECRET: z.string().min(1).default("platform-secrets"),
  /** `<secret>/<key>` holding the Redis password for workers; empty: none. */
  PLATFORM_WORKER_REDIS_SECRET: z
    .string()
    .regex(
      /^$|^[a-z0-9]([-a-z0-9.]*[a-z0-9])?\/[-._a-zA-Z0-9]+$/,
      'expected "<secret name>/<key>", e.g. platform-redis/password',
    )
    .default("platform-redis/password"),
  PLATFORM_WORKER_SERVICE_ACCOUNT: z.string().min(1).optional(),
  PLATFORM_GPU_TYPE_LABEL: z.string().min(1).optional(),
  PLATFORM_WORKER_GRACE_SECONDS: z.coerce
    .number({ message: "expected a whole number of seconds" })
    .int()
    .min(0)
    .optional(),
  PLATFORM_WORKER_STARTUP_SECONDS: z.coerce
    .number({ message: "expected a whole number of seconds" })
    .int()
    .positive()
    .optional(),
  /** The downward API's names for the scaler's own pod: workers reuse its image, and its namespace by default. */
  POD_NAME: z.string().min(1).optional(),
  POD_NAMESPACE: z.string().min(1).optional(),
};

/** What the Kubernetes backend (scaler/backends/endpoints/kubernetes.ts) builds worker Deployments with; unset fields take its defaults. */
export type KubernetesSettings = {
  image?: string;
  imageByFramework?: Partial<Record<Framework, string>>;
  namespace?: string;
  configMapName: string;
  secretName: string;
  redisPasswordSecret?: { name: string; key: string };
  serviceAccountName?: string;
  gpuTypeLabel?: string;
  terminationGracePeriodSeconds?: number;
  startupTimeoutSeconds?: number;
  podName?: string;
  podNamespace?: string;
};

export function kubernetesSettings(e: z.infer<z.ZodObject<typeof kubernetesShape>>): KubernetesSettings {
  const [secret, key] = e.PLATFORM_WORKER_REDIS_SECRET.split("/");
  return {
    ...(e.PLATFORM_WORKER_IMAGE ? { image: e.PLATFORM_WORKER_IMAGE } : {}),
    ...(e.PLATFORM_VLLM_WORKER_IMAGE || e.PLATFORM_DIFFUSERS_WORKER_IMAGE
      ? {
          imageByFramework: {
            ...(e.PLATFORM_VLLM_WORKER_IMAGE ? { vllm: e.PLATFORM_VLLM_WORKER_IMAGE } : {}),
            ...(e.PLATFORM_DIFFUSERS_WORKER_IMAGE ? { diffusers: e.PLATFORM_DIFFUSERS_WORKER_IMAGE } : {}),
          },
        }
      : {}),
    ...(e.PLATFORM_K8S_NAMESPACE ? { namespace: e.PLATFORM_K8S_NAMESPACE } : {}),
    configMapName: e.PLATFORM_WORKER_CONFIGMAP,
    secretName: e.PLATFORM_WORKER_SECRET,
    ...(secret && key ? { redisPasswordSecret: { name: secret, key } } : {}),
    ...(e.PLATFORM_WORKER_SERVICE_ACCOUNT ? { serviceAccountName: e.PLATFORM_WORKER_SERVICE_ACCOUNT } : {}),
    ...(e.PLATFORM_GPU_TYPE_LABEL ? { gpuTypeLabel: e.PLATFORM_GPU_TYPE_LABEL } : {}),
    ...(e.PLATFORM_WORKER_GRACE_SECONDS !== undefined
      ? { terminationGracePeriodSeconds: e.PLATFORM_WORKER_GRACE_SECONDS }
      : {}),
    ...(e.PLATFORM_WORKER_STARTUP_SECONDS !== undefined
      ? { startupTimeoutSeconds: e.PLATFORM_WORKER_STARTUP_SECONDS }
      : {}),
    ...(e.POD_NAME ? { podName: e.POD_NAME } : {}),
    ...(e.POD_NAMESPACE ? { podNamespace: e.POD_NAMESPACE } : {}),
  };
}
