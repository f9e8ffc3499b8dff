/**
 * Service records for tests of what reads them (the dev-center CLI, later the dashboard): built
 * through src/services/record.ts's schemas, so a canned answer is shaped as the API's will be.
 */
import { createHash } from "node:crypto";
import { type Release, Rollout, ServiceRecord, ServiceReplica } from "../../src/services/record.ts";

export const OWNER = { id: "key_1", name: "ana" };
export const T0 = Date.UTC(2026, 0, 2, 3, 4, 5);

/** A digest that tells tags apart (even in its first 12 digits, as the CLI shortens it). */
export function digestOf(tag: string): string {
  return `sha256:${createHash("sha256").update(tag).digest("hex")}`;
}

export function release(tag: string, id = 1): Release {
  return {
    tag,
    digest: digestOf(tag),
    revision: `r${id}`,
    protos: [{ package: "platform.items.v1", version: "1.0.0" }],
  };
}

export function rollout(id: number, tag: string, fields: Partial<Rollout> = {}): Rollout {
  return Rollout.parse({
    id,
    release: release(tag, id),
    from_tag: null,
    cause: id === 1 ? "deploy" : "start",
    phase: "progressing",
    started: T0 + id * 60_000,
    deadline_ms: 300_000,
    by: OWNER,
    ...fields,
  });
}

export function serviceRecord(name: string, latest: Rollout, fields: Partial<ServiceRecord> = {}): ServiceRecord {
  return ServiceRecord.parse({
    org: "acme",
    name,
    repo_type: "js",
    image_repository: `registry.example.com:5000/acme/${name}`,
    port: 8080,
    replicas: 2,
    rpc_services: ["platform.items.v1.ItemService"],
    owner: OWNER,
    created: T0,
    updated: T0,
    overview: "",
    current: null,
    previous: null,
    rollout: latest,
    ...fields,
  });
}

export function replica(id: string, tag: string, state: ServiceReplica["state"], restarts = 0): ServiceReplica {
  return ServiceReplica.parse({
    id,
    revision: "r1",
    tag,
    digest: digestOf(tag),
    state,
    url: "http://127.0.0.1:1",
    started: T0,
    restarts,
    heartbeat: T0,
  });
}

/** A replica as `GET .../status` lists it. */
export function statusReplica(id: string, tag: string, state: ServiceReplica["state"], restarts = 0) {
  const r = replica(id, tag, state, restarts);
  return { id, tag: r.tag, digest: r.digest, state: r.state, ready: state === "ready", restarts: r.restarts };
}
