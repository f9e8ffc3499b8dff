/**
 * Talking to the Kubernetes API, for both backends that use it (endpoints/kubernetes.ts,
 * services/kubernetes.ts): a failed call as an error naming the call, the API's reason and
 * message; a 404 told apart; the namespace to work in when none is configured.
 */
import { readFileSync } from "node:fs";
import { ApiException, type KubeConfig } from "@kubernetes/client-node";
import { z } from "zod";

const SERVICE_ACCOUNT_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/** A failed Kubernetes API call, with the HTTP status and the API's own reason and message. */
export class KubernetesApiError extends Error {
  readonly status: number;
  readonly reason: string | undefined;
  readonly operation: string;
  constructor(operation: string, status: number, reason: string | undefined, apiMessage: string) {
    super(`Kubernetes API: ${operation} failed with ${status}${reason ? ` ${reason}` : ""}: ${apiMessage}`);
    this.name = "KubernetesApiError";
    this.operation = operation;
    this.status = status;
    this.reason = reason;
  }
}

const StatusBody = z.object({ reason: z.string().optional(), message: z.string().optional() });

function toApiError(operation: string, error: unknown): unknown {
  // Connection and TLS failures: say which call and where, keep the cause.
  if (!(error instanceof ApiException)) {
    const detail =
      error instanceof Error
        ? `${error.message}${error.cause instanceof Error ? ` (${error.cause.message})` : ""}`
        : String(error);
    return new Error(`Kubernetes API: ${operation} failed: ${detail}`, { cause: error });
  }
  const raw: unknown = error.body;
  let parsed: unknown = raw;
  if (typeof raw === "string") {
    try {
      parsed = JSON.parse(raw);
    } catch {
      parsed = { message: raw };
    }
  }
  const status = StatusBody.safeParse(parsed);
  const message = status.success && status.data.message ? status.data.message : String(raw ?? "no response body");
  return new KubernetesApiError(operation, error.code, status.success ? status.data.reason : undefined, message);
}

/** Runs one API request, turning its failure into a KubernetesApiError (or an Error naming the call). */
export async function call<T>(operation: string, request: () => Promise<T>): Promise<T> {
  try {
    return await request();
  } catch (error) {
    throw toApiError(operation, error);
  }
}

export function isNotFound(error: unknown): boolean {
  return error instanceof KubernetesApiError && error.status === 404;
}

/** `podNamespace`, else the in-cluster service account's namespace, else the kubeconfig context's, else "default". */
export function defaultNamespace(kubeConfig: KubeConfig, podNamespace: string | undefined): string {
  if (podNamespace) return podNamespace;
  try {
    return readFileSync(SERVICE_ACCOUNT_NAMESPACE_FILE, "utf8").trim();
  } catch {
    return kubeConfig.getContextObject(kubeConfig.getCurrentContext())?.namespace ?? "default";
  }
}
