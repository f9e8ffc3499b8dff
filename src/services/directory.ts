/**
 * The gateway's view of deployed services (docs/services.md, "Through the gateway"): which
 * organization's service implements `<package>.<Service>`, its protocol, its ready replicas, and
 * the descriptors of its published protos for transcoding. Kept in memory and reloaded on the
 * first call after a change notice (`service-events`: a replica became ready or started draining)
 * and at most every RELOAD_MS, so a rollout's traffic shift reaches a gateway within milliseconds
 * and a call costs no Redis round trip otherwise.
 */
import { create, createFileRegistry, type FileRegistry } from "@bufbuild/protobuf";
import { type FileDescriptorProto, FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { decodeDescriptorSet } from "../protos/descriptors.ts";
import { getVersion, type ProtoCatalog, readDescriptorSet } from "../protos/store.ts";
import type { Control } from "../redis/connection.ts";
import { type Subscription, subscribe } from "../redis/subscription.ts";
import { logger } from "../telemetry/log.ts";
import { protocolOf, type UpstreamProtocol } from "./names.ts";
import type { Release, ServiceRecord, ServiceReplica } from "./record.ts";
import { readReplicas } from "./replicas.ts";
import { readAllServices, serviceKey } from "./store.ts";

const log = logger("services");

const RELOAD_MS = 2000;

export type ServiceTarget = {
  org: string;
  service: string;
  protocol: UpstreamProtocol;
  replicas: { id: string; url: string }[];
  descriptors: () => Promise<FileRegistry>;
};

type Loaded = {
  records: ServiceRecord[];
  byRpc: Map<string, ServiceRecord>;
  replicas: Map<string, ServiceReplica[]>;
};

export class ServiceDirectory {
  private readonly ctl: Control;
  private readonly protos: ProtoCatalog;
  private loaded: Loaded | undefined;
  private loadedAt = 0;
  private dirty = true;
  private loading: Promise<Loaded> | undefined;
  private subscription: Subscription | undefined;
  /** Descriptor registries by the releases' proto versions, built once each. */
  private readonly registries = new Map<string, Promise<FileRegistry>>();

  constructor(ctl: Control, protos: ProtoCatalog) {
    this.ctl = ctl;
    this.protos = protos;
  }

  async start(): Promise<void> {
    // A notice may have been missed while the subscription was down: load again once it is back.
    const stale = () => {
      this.dirty = true;
    };
    this.subscription = await subscribe(this.ctl, [this.ctl.keys.serviceEvents], stale, { onListening: stale });
  }

  async close(): Promise<void> {
    await this.subscription?.close();
  }

  /** The service of the caller's organization that implements `rpcService`, or undefined. */
  async resolve(org: string, rpcService: string): Promise<ServiceTarget | undefined> {
    const loaded = await this.current();
    const record = loaded.byRpc.get(`${org}\n${rpcService}`);
    if (!record) return undefined;
    const release = record.current ?? record.rollout.release;
    return {
      org,
      service: record.name,
      protocol: protocolOf(record.repo_type),
      replicas: (loaded.replicas.get(serviceKey(org, record.name)) ?? [])
        .filter((r) => r.state === "ready")
        .map((r) => ({ id: r.id, url: r.url })),
      descriptors: () => this.registryOf(org, release),
    };
  }

  /** Every service with its replicas, as last loaded (the gateway's metrics). */
  async all(): Promise<{ record: ServiceRecord; replicas: ServiceReplica[] }[]> {
    const loaded = await this.current();
    return loaded.records.map((record) => ({
      record,
      replicas: loaded.replicas.get(serviceKey(record.org, record.name)) ?? [],
    }));
  }

  private async current(): Promise<Loaded> {
    if (this.loaded && !this.dirty && Date.now() - this.loadedAt < RELOAD_MS) return this.loaded;
    this.loading ??= this.load().finally(() => {
      this.loading = undefined;
    });
    return this.loading;
  }

  private async load(): Promise<Loaded> {
    // Cleared before reading: a notice that arrives during the read marks the next call's load.
    this.dirty = false;
    const started = Date.now();
    const { services } = await readAllServices(this.ctl);
    const byRpc = new Map<string, ServiceRecord>();
    const replicas = new Map<string, ServiceReplica[]>();
    await Promise.all(
      services.map(async (s) => {
        for (const rpc of s.rpc_services) byRpc.set(`${s.org}\n${rpc}`, s);
        replicas.set(serviceKey(s.org, s.name), await readReplicas(this.ctl, s.org, s.name));
      }),
    );
    this.loaded = { records: services, byRpc, replicas };
    this.loadedAt = started;
    return this.loaded;
  }

  private registryOf(org: string, release: Release): Promise<FileRegistry> {
    const id = `${org}\n${release.protos.map((p) => `${p.package}@${p.version}`).join(",")}`;
    let registry = this.registries.get(id);
    if (!registry) {
      registry = this.buildRegistry(org, release);
      registry.catch((e: Error) => {
        log.warn({ org, release: release.tag }, `reading the protos of ${release.tag} failed: ${e.message}`);
        this.registries.delete(id);
      });
      if (this.registries.size > 1000) this.registries.clear();
      this.registries.set(id, registry);
    }
    return registry;
  }

  private async buildRegistry(org: string, release: Release): Promise<FileRegistry> {
    const files = new Map<string, FileDescriptorProto>();
    for (const p of release.protos) {
      const image = decodeDescriptorSet(
        await readDescriptorSet(this.protos, await getVersion(this.protos, org, p.package, p.version)),
      );
      for (const f of image.file) if (!files.has(f.name)) files.set(f.name, f);
    }
    return createFileRegistry(create(FileDescriptorSetSchema, { file: [...files.values()] }));
  }
}
