/**
 * How a Python scaffold names things: the service's own package, the modules `platform proto
 * generate --lang python` writes for a proto file (rooted below `platform/`, which would shadow the
 * standard library's `platform` module), and the Python reference to a message class.
 */
import type { MessageSummary } from "../../protos/descriptors.ts";
import type { ScaffoldInput } from "../types.ts";

/** `items` → `items_service`: never the generated stubs' own top-level package (`items`). */
export function packageName(name: string): string {
  return `${name.replace(/-/g, "_")}_service`;
}

/**
 * The module protoc's python generator writes for `file` (relative to the proto root), as proto
 * generate lays it out: `platform/items/v1/items.proto` → `items.v1.items_pb2`. Files outside
 * `platform/` (a vendored `google/api/*.proto`, the well-known types) keep their paths.
 */
export function moduleOf(file: string, suffix: "_pb2" | "_pb2_grpc" = "_pb2"): string {
  const parts = file
    .replace(/^platform\//, "")
    .replace(/\.proto$/, "")
    .split("/");
  const base = (parts.pop() as string).replace(/[-.]/g, "_");
  return [...parts, `${base}${suffix}`].join(".");
}

/** Python imports for a set of modules, each under a name unique in the file. */
export class Imports {
  readonly #aliases = new Map<string, string>();

  /** The name `module` is imported as (`items_pb2`; `a_v1_types_pb2` when two end alike). */
  use(module: string): string {
    const known = this.#aliases.get(module);
    if (known) return known;
    const short = module.split(".").at(-1) as string;
    const taken = [...this.#aliases.values()].includes(short);
    const alias = taken ? module.replace(/\./g, "_") : short;
    this.#aliases.set(module, alias);
    return alias;
  }

  /**
   * `from items.v1 import items_pb2, items_pb2_grpc`, one line per package, sorted: the third-party
   * block (protobuf's own modules) or the first-party one (the generated stubs), as isort and ruff
   * group them.
   */
  lines(block: "third-party" | "first-party"): string[] {
    const byPackage = new Map<string, string[]>();
    for (const [module, alias] of this.#aliases) {
      if (module.startsWith("google.protobuf.") !== (block === "third-party")) continue;
      const dot = module.lastIndexOf(".");
      const [from, name] = dot < 0 ? ["", module] : [module.slice(0, dot), module.slice(dot + 1)];
      const entry = alias === name ? name : `${name} as ${alias}`;
      byPackage.set(from, [...(byPackage.get(from) ?? []), entry]);
    }
    return [...byPackage.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([from, names]) =>
        from === "" ? `import ${names.sort().join(", ")}` : `from ${from} import ${names.sort().join(", ")}`,
      );
  }
}

/** The message's summary, from the service's messages or its package's. */
export function messageOf(input: ScaffoldInput, fullName: string): MessageSummary | undefined {
  return input.messages.get(fullName) ?? input.package.messages.find((m) => m.full_name === fullName);
}

/** The well-known types' files by message (protobuf's runtime ships their modules). */
const WELL_KNOWN: Record<string, string> = {
  Any: "any",
  Duration: "duration",
  Empty: "empty",
  FieldMask: "field_mask",
  Struct: "struct",
  Value: "struct",
  ListValue: "struct",
  Timestamp: "timestamp",
  ...Object.fromEntries(
    ["Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes"].map((t) => [
      `${t}Value`,
      "wrappers",
    ]),
  ),
};

/**
 * `items_pb2.GetItemRequest` for a message whose file is known (or a well-known type); undefined
 * otherwise (a message of another package the input does not describe: the caller falls back to a
 * lookup by full name).
 */
export function messageRef(input: ScaffoldInput, imports: Imports, fullName: string): string | undefined {
  const wellKnown = fullName.startsWith("google.protobuf.") ? WELL_KNOWN[fullName.slice(16)] : undefined;
  if (wellKnown) return `${imports.use(`google.protobuf.${wellKnown}_pb2`)}.${fullName.slice(16)}`;
  const message = messageOf(input, fullName);
  // Its name inside its package (`Outer.Inner`) is its attribute path in the module.
  return message ? `${imports.use(moduleOf(message.file))}.${message.name}` : undefined;
}

/** `GetItem` → `get_item`, `ListHTTPRoutes` → `list_http_routes`. */
export function snakeCase(name: string): string {
  return name
    .replace(/([A-Z]+)([A-Z][a-z])/g, "$1_$2")
    .replace(/([a-z0-9])([A-Z])/g, "$1_$2")
    .toLowerCase();
}
