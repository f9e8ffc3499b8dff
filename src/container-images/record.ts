/**
 * The record of a published service image (docs/publish.md, "Image records"): what `platform
 * publish` pushed (repository, tag, digest), from which commit, implementing which proto package
 * versions, by whom. The dev center deploys only tags recorded here, so a tag that was never
 * published through the platform cannot be deployed by mistake.
 */
import { z } from "zod";
import { OrgId } from "../contracts/orgs.ts";
import { ProtoPackageName, ProtoVersionName } from "../protos/names.ts";
import { GitSha, ImageDigest, ImageRepository, ImageServiceName, ImageTag } from "./names.ts";

export const ImageRecord = z.object({
  org: OrgId,
  service: ImageServiceName,
  repository: ImageRepository,
  tag: ImageTag,
  digest: ImageDigest,
  /** The commit it was built from (short form, as in the tag). */
  git_sha: GitSha,
  /** Built from a tree with uncommitted changes (`--allow-dirty`): the tag ends in `-dirty`. */
  dirty: z.boolean(),
  /** The service's own version (package.json or pyproject.toml). */
  version: z.string().max(128),
  /** The proto package versions it implements: the workspace's packages at their latest published versions. */
  protos: z.array(z.object({ package: ProtoPackageName, version: ProtoVersionName })).max(100),
  /** Epoch seconds, as every record's `created`. */
  created: z.number().int(),
  /** The key or user that published it (a CLI token's subject), by id and name. */
  published_by: z.object({ id: z.string(), name: z.string() }),
});
export type ImageRecord = z.infer<typeof ImageRecord>;

/** `repository:tag@digest`: the pushed reference, pinned. */
export function imageReference(record: Pick<ImageRecord, "repository" | "tag" | "digest">): string {
  return `${record.repository}:${record.tag}@${record.digest}`;
}
