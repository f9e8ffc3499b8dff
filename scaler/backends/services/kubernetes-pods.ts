/**
 * How the Kubernetes services backend reads a deployed service back (docs/services.md): a pod as a
 * replica record, a Deployment's status as a rollout's outcome, a pod's trouble (a failed pull, a
 * crash) in the platform's words. Pure functions of the objects, as the manifests beside them
 * (kubernetes-manifests.ts), so each is unit-testable.
 */
import { constants } from "node:os";
import type { V1Deployment, V1Pod } from "@kubernetes/client-node";
import type { ServiceRecord, ServiceReplica } from "../../../src/services/record.ts";
import { fixPullCommand } from "../../../src/registry-credentials/resolve.ts";
import { pullFailure } from "../../../src/container-images/pull-failure.ts";
import { metricsPort, SERVICE_ANNOTATIONS, SERVICE_CONTAINER, SERVICE_LABELS } from "./kubernetes-manifests.ts";

/** A signal's name from the number Kubernetes reports (9 → SIGKILL). */
export function signalName(signal: number | undefined): string | null {
  if (signal === undefined || signal === 0) return null;
  return Object.entries(constants.signals).find(([, n]) => n === signal)?.[0] ?? `signal ${signal}`;
}

/** Replaces every secret value (of 4 bytes or more: shorter ones would mask ordinary words) with "***". */
export function maskSecrets(text: string, secrets: Record<string, string>): string {
  const values = Object.values(secrets)
    .filter((v) => v.length >= 4)
    .sort((a, b) => b.length - a.length);
  let out = text;
  for (const value of values) out = out.split(value).join("***");
  return out;
}

/** Epoch ms of a time the client deserialised (a Date) or a test wrote (a string). */
function ms(time: Date | string | undefined): number | undefined {
  if (time === undefined) return undefined;
  const n = time instanceof Date ? time.getTime() : Date.parse(time);
  return Number.isNaN(n) ? undefined : n;
}

function hostPort(ip: string, port: number): string {
  return ip.includes(":") ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/**
 * A pod as the replica record the gateway routes by (src/services/record.ts): `ready` only with
 * an IP and its readiness passing; `draining` once it is being deleted (it takes no new calls);
 * `crashed` while its container waits to restart or has exited; else `starting`.
 */
export function podReplica(pod: V1Pod, service: ServiceRecord, now: number): ServiceReplica | undefined {
  const meta = pod.metadata;
  const tag = meta?.annotations?.[SERVICE_ANNOTATIONS.tag];
  const digest = meta?.annotations?.[SERVICE_ANNOTATIONS.digest];
  if (!meta?.name || !tag || !digest) return undefined;
  const container = pod.status?.containerStatuses?.find((c) => c.name === SERVICE_CONTAINER);
  const readyCondition = pod.status?.conditions?.find((c) => c.type === "Ready");
  const ip = pod.status?.podIP;
  const ready = container?.ready === true && readyCondition?.status === "True" && ip !== undefined;
  const state: ServiceReplica["state"] = meta.deletionTimestamp
    ? "draining"
    : ready
      ? "ready"
      : container?.state?.waiting?.reason === "CrashLoopBackOff" ||
          container?.state?.terminated !== undefined ||
          pod.status?.phase === "Failed"
        ? "crashed"
        : "starting";
  const exited = container?.lastState?.terminated ?? container?.state?.terminated;
  const finished = ms(exited?.finishedAt);
  const readyAt = ready ? ms(readyCondition?.lastTransitionTime) : undefined;
  return {
    id: meta.name,
    revision: meta.labels?.[SERVICE_LABELS.revision] ?? "",
    tag,
    digest,
    state,
    url: ip ? `http://${hostPort(ip, service.port)}` : "",
    ...(ip ? { metrics_url: `http://${hostPort(ip, metricsPort(service))}/metrics` } : {}),
    started: ms(pod.status?.startTime) ?? ms(meta.creationTimestamp) ?? now,
    ...(readyAt !== undefined ? { ready_at: readyAt } : {}),
    restarts: container?.restartCount ?? 0,
    ...(exited
      ? { last_exit: { code: exited.exitCode ?? null, signal: signalName(exited.signal), at: finished ?? now } }
      : {}),
    heartbeat: now,
  };
}

export type RolloutOutcome = { phase: "complete" } | { phase: "failed"; reason: string };

/**
 * The outcome of the record's rollout as its Deployment's status tells it, or undefined while
 * it is still progressing or the status is not about this rollout yet: the Deployment must
 * carry the rollout's id and release, and the controller must have seen its latest spec
 * (observedGeneration), or a previous rollout's conditions would be read as this one's.
 * Complete is Kubernetes' own definition (what `kubectl rollout status` waits for): every
 * replica updated and available, no old one left.
 */
export function rolloutOutcome(
  deployment: V1Deployment | undefined,
  service: ServiceRecord,
): RolloutOutcome | undefined {
  const { rollout } = service;
  if (!deployment || rollout.phase !== "progressing") return undefined;
  if (deployment.metadata?.annotations?.[SERVICE_ANNOTATIONS.rollout] !== String(rollout.id)) return undefined;
  if (deployment.spec?.template.metadata?.labels?.[SERVICE_LABELS.revision] !== rollout.release.revision)
    return undefined;
  const status = deployment.status;
  if ((status?.observedGeneration ?? 0) < (deployment.metadata?.generation ?? 1)) return undefined;
  const progressing = status?.conditions?.find((c) => c.type === "Progressing");
  if (progressing?.status === "False" && progressing.reason === "ProgressDeadlineExceeded") {
    const seconds = deployment.spec?.progressDeadlineSeconds ?? Math.ceil(rollout.deadline_ms / 1000);
    return {
      phase: "failed",
      reason: `the new replicas of ${rollout.release.tag} did not become ready within ${seconds} s (${progressing.message ?? "progress deadline exceeded"})`,
    };
  }
  const desired = deployment.spec?.replicas ?? 1;
  const available = status?.conditions?.find((c) => c.type === "Available")?.status === "True";
  if (
    available &&
    (status?.updatedReplicas ?? 0) === desired &&
    (status?.replicas ?? 0) === desired &&
    (status?.readyReplicas ?? 0) >= desired &&
    (status?.availableReplicas ?? 0) >= desired
  )
    return { phase: "complete" };
  return undefined;
}

/** The kubelet's waiting reasons for an image it could not pull. */
const PULL_REASONS = new Set(["ErrImagePull", "ImagePullBackOff", "RegistryUnavailable", "ErrImageNeverPull"]);

function kubeletPullTrouble(image: string, message: string): string {
  const at = image.lastIndexOf("@");
  const repository = at > 0 ? image.slice(0, at) : image;
  const host = repository.split("/")[0] as string;
  return pullFailure(
    {
      repository,
      digest: at > 0 ? image.slice(at + 1) : "",
      refusedHint: `; an admin of the organization runs: ${fixPullCommand(host)}`,
    },
    message,
    [],
    "the kubelet",
  ).message;
}

/** What a pod says about why it is not ready, in one line: waiting reason, last exit, restarts. */
export function podTrouble(pod: V1Pod): string | undefined {
  const container = pod.status?.containerStatuses?.find((c) => c.name === SERVICE_CONTAINER);
  const parts: string[] = [];
  const waiting = container?.state?.waiting;
  if (waiting?.reason) {
    // A pull's message is the kubelet's account of what the registry (one a tenant names) sent:
    // said in the platform's words instead (scaler/container-images/pull.ts), never echoed.
    const pulling = PULL_REASONS.has(waiting.reason) && container?.image;
    const message = pulling ? kubeletPullTrouble(container.image as string, waiting.message ?? "") : waiting.message;
    parts.push(`${waiting.reason}${message ? `: ${message}` : ""}`);
  }
  const exited = container?.lastState?.terminated ?? container?.state?.terminated;
  if (exited) {
    const signal = signalName(exited.signal);
    parts.push(
      `exited with code ${exited.exitCode}${signal ? ` (${signal})` : ""}${exited.reason ? ` ${exited.reason}` : ""}${exited.message ? `: ${exited.message}` : ""}`,
    );
  }
  // Probe failures are only in the pod's events; that it runs unready says which check to look at.
  if (container?.state?.running && !container.ready) parts.push("running but not ready (its readiness check fails)");
  if (container?.restartCount) parts.push(`${container.restartCount} restarts`);
  if (!container) {
    const scheduled = pod.status?.conditions?.find((c) => c.type === "PodScheduled");
    if (scheduled?.status === "False") parts.push(`not scheduled: ${scheduled.message ?? scheduled.reason ?? ""}`);
  }
  return parts.length > 0 ? parts.join("; ") : undefined;
}
