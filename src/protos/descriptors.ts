/**
 * Reading built descriptor sets: a `FileDescriptorSet` in binary (what `buf build -o image.binpb` writes; buf calls
 * it an image, and its own image format is the same message with an extension protobuf-es keeps as unknown fields). The
 * catalog checks a published descriptor set with it and lists a version's services, RPCs and messages; the
 * CLI places its lint findings with `spanOf`.
 */
import {
  createFileRegistry,
  type DescEnum,
  type DescField,
  type DescFile,
  type DescMessage,
  type DescService,
  fromBinary,
  ScalarType,
} from "@bufbuild/protobuf";
import { type FileDescriptorProto, type FileDescriptorSet, FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";

/** Field numbers of FileDescriptorProto and the messages below it, as source_code_info paths use them. */
export const SOURCE_PATH = {
  package: 2,
  messageType: 4,
  enumType: 5,
  service: 6,
  syntax: 12,
  edition: 14,
  // Inside a DescriptorProto:
  field: 2,
  nestedType: 3,
  nestedEnum: 4,
  // Inside a ServiceDescriptorProto:
  method: 2,
} as const;

/** A span in a source file, 1-based as editors and `path:line:column` show it. */
export type Span = { line: number; column: number; end_line: number; end_column: number };

/** Decodes a descriptor set; throws with protobuf-es's reason when the bytes are not a FileDescriptorSet. */
export function decodeDescriptorSet(bytes: Uint8Array): FileDescriptorSet {
  return fromBinary(FileDescriptorSetSchema, bytes);
}

function locationOf(file: FileDescriptorProto, path: readonly number[]) {
  return file.sourceCodeInfo?.location.find(
    (l) => l.path.length === path.length && l.path.every((n, i) => n === path[i]),
  );
}

/** Where the element at `path` (a source_code_info path) is written; undefined without source info. */
export function spanOf(file: FileDescriptorProto, path: readonly number[]): Span | undefined {
  const span = locationOf(file, path)?.span;
  if (!span || span.length < 3) return undefined;
  const [line, column, third, fourth] = span as [number, number, number, number?];
  // Three numbers: start line, start column, end column, on one line.
  return fourth === undefined
    ? { line: line + 1, column: column + 1, end_line: line + 1, end_column: third + 1 }
    : { line: line + 1, column: column + 1, end_line: third + 1, end_column: fourth + 1 };
}

function commentOf(file: FileDescriptorProto, path: readonly number[]): string | undefined {
  const text = locationOf(file, path)?.leadingComments?.trim();
  return text ? text : undefined;
}

export type RpcSummary = {
  name: string;
  input: string;
  output: string;
  client_streaming: boolean;
  server_streaming: boolean;
  comment?: string;
};
export type ServiceSummary = { name: string; full_name: string; file: string; comment?: string; rpcs: RpcSummary[] };
export type FieldSummary = { name: string; number: number; type: string; json_name: string; comment?: string };
export type MessageSummary = {
  name: string;
  full_name: string;
  file: string;
  comment?: string;
  fields: FieldSummary[];
};
export type EnumSummary = {
  name: string;
  full_name: string;
  file: string;
  comment?: string;
  values: { name: string; number: number }[];
};
/** What one package of a descriptor set declares, in source order. */
export type PackageSummary = {
  package: string;
  files: string[];
  services: ServiceSummary[];
  messages: MessageSummary[];
  enums: EnumSummary[];
};

const scalarName = (s: ScalarType) => ScalarType[s].toLowerCase();

/** The field's type as it is written in a .proto file (`repeated platform.items.v1.Item`, `map<string, int32>`). */
function typeOf(f: DescField): string {
  switch (f.fieldKind) {
    case "scalar":
      return `${f.proto.proto3Optional ? "optional " : ""}${scalarName(f.scalar)}`;
    case "enum":
      return `${f.proto.proto3Optional ? "optional " : ""}${f.enum.typeName}`;
    case "message":
      return f.message.typeName;
    case "list":
      return `repeated ${f.listKind === "scalar" ? scalarName(f.scalar) : f.listKind === "enum" ? f.enum.typeName : f.message.typeName}`;
    case "map":
      return `map<${scalarName(f.mapKey)}, ${f.mapKind === "scalar" ? scalarName(f.scalar) : f.mapKind === "enum" ? f.enum.typeName : f.message.typeName}>`;
  }
}

/** `name` relative to the package (`Outer.Inner`), as people read it next to the package's name. */
function localName(pkg: string, typeName: string): string {
  return pkg === "" ? typeName : typeName.slice(pkg.length + 1);
}

function summarizeEnum(file: DescFile, e: DescEnum, path: number[]): EnumSummary {
  return {
    name: localName(file.proto.package, e.typeName),
    full_name: e.typeName,
    file: file.proto.name,
    ...withComment(commentOf(file.proto, path)),
    values: e.values.map((v) => ({ name: v.name, number: v.number })),
  };
}

function withComment(comment: string | undefined): { comment?: string } {
  return comment === undefined ? {} : { comment };
}

/** The message and everything nested in it, depth first; map entries are the compiler's, not the author's. */
function summarizeMessage(
  file: DescFile,
  m: DescMessage,
  path: number[],
  into: { messages: MessageSummary[]; enums: EnumSummary[] },
): void {
  if (m.proto.options?.mapEntry) return;
  into.messages.push({
    name: localName(file.proto.package, m.typeName),
    full_name: m.typeName,
    file: file.proto.name,
    ...withComment(commentOf(file.proto, path)),
    fields: m.fields.map((f) => ({
      name: f.name,
      number: f.number,
      type: typeOf(f),
      json_name: f.jsonName,
      ...withComment(commentOf(file.proto, [...path, SOURCE_PATH.field, m.proto.field.indexOf(f.proto)])),
    })),
  });
  m.nestedEnums.forEach((e, i) => {
    into.enums.push(summarizeEnum(file, e, [...path, SOURCE_PATH.nestedEnum, i]));
  });
  // Map entries are nested types too, but not among nestedMessages: the index is the proto's own.
  for (const n of m.nestedMessages)
    summarizeMessage(file, n, [...path, SOURCE_PATH.nestedType, m.proto.nestedType.indexOf(n.proto)], into);
}

function summarizeService(file: DescFile, s: DescService, index: number): ServiceSummary {
  const path = [SOURCE_PATH.service, index];
  return {
    name: s.name,
    full_name: s.typeName,
    file: file.proto.name,
    ...withComment(commentOf(file.proto, path)),
    rpcs: s.methods.map((m, j) => ({
      name: m.name,
      input: m.input.typeName,
      output: m.output.typeName,
      client_streaming: m.methodKind === "client_streaming" || m.methodKind === "bidi_streaming",
      server_streaming: m.methodKind === "server_streaming" || m.methodKind === "bidi_streaming",
      ...withComment(commentOf(file.proto, [...path, SOURCE_PATH.method, j])),
    })),
  };
}

/**
 * What `pkg` declares in `image`. Throws when the descriptor set does not hold every file its files import
 * (a descriptor set that cannot be used to read or transcode a call) or holds no file of `pkg`.
 */
export function summarizePackage(image: FileDescriptorSet, pkg: string): PackageSummary {
  const registry = createFileRegistry(image);
  const files = image.file.filter((f) => f.package === pkg).map((f) => registry.getFile(f.name) as DescFile);
  if (files.length === 0) throw new Error(`the image holds no file of package ${pkg}`);
  const summary: PackageSummary = { package: pkg, files: [], services: [], messages: [], enums: [] };
  for (const file of files) {
    summary.files.push(file.proto.name);
    file.services.forEach((s, i) => {
      summary.services.push(summarizeService(file, s, i));
    });
    file.messages.forEach((m, i) => {
      summarizeMessage(file, m, [SOURCE_PATH.messageType, i], summary);
    });
    file.enums.forEach((e, i) => {
      summary.enums.push(summarizeEnum(file, e, [SOURCE_PATH.enumType, i]));
    });
  }
  return summary;
}
