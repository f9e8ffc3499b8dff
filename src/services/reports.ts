/**
 * What backends report about services, written to Redis (scaler/backends/services/backend.ts's
 * ServiceReports): replica records, rollout outcomes, log lines, and the environment a release
 * runs with (its secrets opened, here only). Log lines are masked with the secret values this
 * process has opened for that service, so a service that prints its environment does not put a
 * secret into Redis, the API or the dashboard.
 */
import type { Control } from "../redis/connection.ts";
import type { ServiceReplica } from "./record.ts";
import { appendLog } from "./logs.ts";
import { removeServiceReplica, writeServiceReplica } from "./replicas.ts";
import type { SecretBox } from "./secrets.ts";
import { pruneReleases, readRelease, serviceKey, updateService } from "./store.ts";
import { openSecrets } from "./variables.ts";

const MASK = "[secret]";

export class ServiceReportStore {
  private readonly ctl: Control;
  private readonly box: SecretBox;
  /** Per service, the secret values opened for its releases (4 characters or more: shorter ones would mask noise). */
  private readonly secretValues = new Map<string, Set<string>>();

  constructor(ctl: Control, box: SecretBox) {
    this.ctl = ctl;
    this.box = box;
  }

  replica(org: string, name: string, replica: ServiceReplica): Promise<void> {
    return writeServiceReplica(this.ctl, org, name, replica);
  }

  replicaGone(org: string, name: string, id: string): Promise<void> {
    return removeServiceReplica(this.ctl, org, name, id);
  }

  async rolloutFinished(
    org: string,
    name: string,
    rolloutId: number,
    outcome: { phase: "complete" } | { phase: "failed"; reason: string },
  ): Promise<void> {
    const updated = await updateService(this.ctl, org, name, (record) => {
      const rollout = record.rollout;
      if (rollout.id !== rolloutId || rollout.phase !== "progressing") return undefined;
      const finished = { ...rollout, finished: Date.now() };
      if (outcome.phase === "failed")
        return { ...record, rollout: { ...finished, phase: "failed", reason: this.mask(org, name, outcome.reason) } };
      const moved = record.current !== null && record.current.revision !== rollout.release.revision;
      return {
        ...record,
        previous: moved ? record.current : record.previous,
        current: rollout.release,
        rollout: { ...finished, phase: "complete" },
      };
    }).catch(() => undefined); // deleted meanwhile: nothing to end
    if (updated) await pruneReleases(this.ctl, updated);
  }

  log(org: string, name: string, line: { replica: string; tag: string; text: string }): Promise<void> {
    return appendLog(this.ctl, org, name, { ...line, text: this.mask(org, name, line.text) });
  }

  /** The variables and the opened secrets apart (Kubernetes puts them in a ConfigMap and a Secret). */
  async environmentParts(
    org: string,
    name: string,
    revision: string,
  ): Promise<{ env: Record<string, string>; secrets: Record<string, string> }> {
    const snapshot = await readRelease(this.ctl, org, name, revision);
    if (!snapshot) throw new Error(`the environment of ${name} ${revision} is not written yet`);
    const secrets = openSecrets(this.box, org, name, snapshot.secrets);
    const known = this.secretValues.get(serviceKey(org, name)) ?? new Set<string>();
    for (const value of Object.values(secrets)) if (value.length >= 4) known.add(value);
    this.secretValues.set(serviceKey(org, name), known);
    return { env: snapshot.env, secrets };
  }

  async environment(org: string, name: string, revision: string): Promise<Record<string, string>> {
    const { env, secrets } = await this.environmentParts(org, name, revision);
    return { ...env, ...secrets };
  }

  private mask(org: string, name: string, text: string): string {
    let out = text;
    for (const value of this.secretValues.get(serviceKey(org, name)) ?? []) out = out.split(value).join(MASK);
    return out;
  }
}
