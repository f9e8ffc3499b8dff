/**
 * Which proto service `platform service create <name>` implements: buf builds the workspace's descriptor set
 * (imports included, so every message can be read), and the services its own packages declare are
 * matched against the name (`items` → `platform.items.v1.ItemService`: the package's domain or the
 * service's name, singular or plural, without "Service"). `--service` names one outright. No
 * service, or a name that several match, is an error listing what was found.
 */
import type { FileDescriptorSet } from "@bufbuild/protobuf/wkt";
import {
  decodeDescriptorSet,
  type MessageSummary,
  type PackageSummary,
  type ServiceSummary,
  summarizePackage,
} from "../protos/descriptors.ts";
import {
  bufFailure,
  type Finding,
  formatFinding,
  type ProtoWorkspace,
  parseBufFindings,
  runBuf,
} from "../protos/buf.ts";
import { CommandError } from "../process/command-error.ts";

export type Discovered = {
  service: ServiceSummary;
  package: PackageSummary;
  messages: ReadonlyMap<string, MessageSummary>;
  /** The package's .proto files, relative to the proto root. */
  protoFiles: string[];
};

/** The workspace's descriptor set with imports, as buf builds it; compile errors are listed. */
async function buildDescriptorSet(ws: ProtoWorkspace): Promise<FileDescriptorSet> {
  if (ws.files.length === 0)
    throw new CommandError(
      `no .proto files in ${ws.modules.map((m) => `${m}/`).join(", ")}: write the service's contract first (docs/protos.md), then run platform service create`,
    );
  const run = await runBuf(["build", "--error-format", "json", "-o", "-"], ws.root);
  if (run.code !== 0) {
    // With the descriptor set on stdout, buf writes its compile findings (JSON, one a line) on stderr.
    let findings: Finding[] = [];
    try {
      findings = parseBufFindings(run.stderr);
    } catch {
      // Not findings: buf's own failure, reported as it is below.
    }
    if (findings.length > 0)
      throw new CommandError(
        `the protos do not compile (\`platform proto lint\` shows every finding):\n${findings.map(formatFinding).join("\n")}`,
      );
    throw bufFailure("buf build", run);
  }
  return decodeDescriptorSet(run.stdout);
}

/** The names buf gives the workspace's own files (relative to their module), not its imports. */
function ownNames(ws: ProtoWorkspace): Set<string> {
  return new Set(
    ws.files.map((f) => {
      const m = ws.modules.find((m) => m === "." || f.startsWith(`${m}/`));
      return m === undefined || m === "." ? f : f.slice(m.length + 1);
    }),
  );
}

/** `items`, `Item`, `ItemService`, `item-service` → `item`: what a name and a service are compared by. */
export function nameKey(name: string): string {
  return name
    .toLowerCase()
    .replace(/[^a-z0-9]/g, "")
    .replace(/service$/, "")
    .replace(/s$/, "");
}

/** The domain of `platform.<domain>.v<major>` (or the last non-version part of another package name). */
function domainOf(pkg: string): string {
  const parts = pkg.split(".").filter((p) => !/^v\d+/.test(p));
  return parts.at(-1) ?? pkg;
}

/** The field types a message refers to (`repeated a.B`, `map<string, a.B>`, `a.B`) by full name. */
function referencedTypes(type: string): string[] {
  const map = /^map<[^,]+,\s*(.+)>$/.exec(type);
  const bare = (map ? map[1]! : type).replace(/^(repeated|optional) /, "");
  return bare.includes(".") ? [bare] : [];
}

type DescriptorSetServices = { packages: PackageSummary[]; services: ServiceSummary[] };

/** The services and packages of the workspace's own files in `image`, summarized. */
function descriptorSetServices(
  image: FileDescriptorSet,
  own: Set<string>,
): DescriptorSetServices & { all: PackageSummary[] } {
  const names = [...new Set(image.file.map((f) => f.package))];
  const all = names.map((p) => summarizePackage(image, p));
  const packages = all.filter((p) => p.files.some((f) => own.has(f)));
  const services = packages.flatMap((p) => p.services.filter((s) => own.has(s.file)));
  return { packages, services, all };
}

/** Picks the service for `name`, or `explicit` (a full name, or a short name that only one service has). */
export function pickService(name: string, services: ServiceSummary[], explicit?: string): ServiceSummary {
  const found = services.map((s) => s.full_name).join(", ");
  if (explicit !== undefined) {
    const byFull = services.find((s) => s.full_name === explicit);
    const byShort = services.filter((s) => s.name === explicit);
    const hit = byFull ?? (byShort.length === 1 ? byShort[0] : undefined);
    if (hit) return hit;
    throw new CommandError(
      services.length === 0
        ? `--service ${explicit}: the workspace's protos declare no service`
        : `--service ${explicit}: no such service${byShort.length > 1 ? " (several have that name: give the full name)" : ""}; the workspace's protos declare ${found}`,
      2,
    );
  }
  if (services.length === 0)
    throw new CommandError(
      "the workspace's protos declare no service: add one (service ItemService { rpc GetItem(...) returns (...); }) and run platform proto lint",
    );
  const key = nameKey(name);
  const matches = services.filter(
    (s) => nameKey(s.name) === key || nameKey(domainOf(s.full_name.slice(0, -s.name.length - 1))) === key,
  );
  if (matches.length === 1) return matches[0]!;
  if (matches.length === 0 && services.length === 1) return services[0]!;
  const candidates = (matches.length > 0 ? matches : services).map((s) => s.full_name).join(", ");
  throw new CommandError(
    `${matches.length > 1 ? `several services match "${name}"` : `no service matches "${name}"`}: ${candidates}; name one with --service <package.Service>`,
    2,
  );
}

/** The service's request and response messages and every message they hold, by full name. */
export function messagesOf(service: ServiceSummary, all: PackageSummary[]): Map<string, MessageSummary> {
  const known = new Map(all.flatMap((p) => p.messages.map((m) => [m.full_name, m] as const)));
  const out = new Map<string, MessageSummary>();
  const queue = service.rpcs.flatMap((r) => [r.input, r.output]);
  for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
    const message = known.get(next);
    if (!message || out.has(next)) continue;
    out.set(next, message);
    for (const f of message.fields) queue.push(...referencedTypes(f.type));
  }
  return out;
}

export async function discoverService(ws: ProtoWorkspace, name: string, explicit?: string): Promise<Discovered> {
  const image = await buildDescriptorSet(ws);
  const { services, all } = descriptorSetServices(image, ownNames(ws));
  const service = pickService(name, services, explicit);
  const pkgName = service.full_name.slice(0, -service.name.length - 1);
  const pkg = all.find((p) => p.package === pkgName) as PackageSummary;
  return { service, package: pkg, messages: messagesOf(service, all), protoFiles: pkg.files };
}
