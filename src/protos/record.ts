/**
 * The proto catalog's records in Redis: one per published version, and one summary per package
 * (kept by the publish script, so listing packages is one read). Descriptor sets and sources live in the
 * artifact store, named by the version's `upload` (store.ts).
 */
import { z } from "zod";
import { OrgId } from "../contracts/orgs.ts";
import { ProtoFilePath, ProtoPackageName, ProtoVersionName } from "./names.ts";

const Sha256 = z.string().regex(/^[0-9a-f]{64}$/);

export const ProtoVersion = z.object({
  package: ProtoPackageName,
  version: ProtoVersionName,
  org: OrgId,
  /** Epoch seconds, as every record's `created`. */
  created: z.number().int(),
  /** The key or user that published it (a CLI token's subject), by id and name. */
  published_by: z.object({ id: z.string(), name: z.string() }),
  /** Published with `--allow-breaking`: it may break clients of the version before it. */
  allow_breaking: z.boolean(),
  image: z.object({ size: z.number().int().nonnegative(), sha256: Sha256 }),
  files: z.array(z.object({ path: ProtoFilePath, size: z.number().int().nonnegative(), sha256: Sha256 })),
  /** The package's services by full name, so a list says what a version serves without reading its image. */
  service_names: z.array(z.string()),
  /** Names this publish's objects (`protos/<org>/<package>/<version>/<upload>/`): a publish that lost a race never touches the winner's. */
  upload: z.string().regex(/^[0-9a-f]{16}$/),
});
export type ProtoVersion = z.infer<typeof ProtoVersion>;

/** A version as the API shows it: where its objects lie is the store's business. */
export type PublicProtoVersion = Omit<ProtoVersion, "upload">;

export function publicVersion(record: ProtoVersion): PublicProtoVersion {
  const { upload: _, ...rest } = record;
  return rest;
}

export const ProtoPackage = z.object({
  package: ProtoPackageName,
  /** The highest version (semantic order), not the last published. */
  latest: ProtoVersionName,
  versions: z.number().int().positive(),
  created: z.number().int(),
  updated: z.number().int(),
});
export type ProtoPackage = z.infer<typeof ProtoPackage>;
