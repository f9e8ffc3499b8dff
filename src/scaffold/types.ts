/**
 * What a language's scaffold gets and gives back: `platform service create` finds the service in the
 * workspace's protos, hands each language the same input, and writes the files it returns (never
 * replacing one without --force).
 */
import type { MessageSummary, PackageSummary, ServiceSummary } from "../protos/descriptors.ts";

export type ScaffoldInput = {
  /** The service's name as the team types it (`items`): directory-safe, lowercase, `-` allowed. */
  name: string;
  /** `--example`: the example ItemService instead of handlers that answer Unimplemented. */
  example: boolean;
  /** The proto service the scaffold implements (`platform.items.v1.ItemService`). */
  service: ServiceSummary;
  /** Everything its package declares (the messages give the example its fields). */
  package: PackageSummary;
  /** The service's request and response messages and the messages they hold, by full name. */
  messages: ReadonlyMap<string, MessageSummary>;
  /** `.platformrc.json`'s protoRoot, relative to the workspace root (`proto`). */
  protoRoot: string;
  /** The package's .proto files, relative to the proto root (`platform/items/v1/items.proto`). */
  protoFiles: string[];
  /** The workspace's image repository, when it has one (the README's publish and deploy steps name it). */
  imageRepository: string | undefined;
  /** The platform's base URL (`.platformrc.json`'s registryUrl). */
  registryUrl: string;
};

/** One file to write, relative to the workspace root. */
export type ScaffoldFile = { path: string; content: string; executable?: boolean };

export type Scaffolder = (input: ScaffoldInput) => ScaffoldFile[] | Promise<ScaffoldFile[]>;
