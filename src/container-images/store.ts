/**
 * The image records per organization (docs/publish.md, "Image records"): one Redis hash per
 * organization, `"<service>:<tag>"` → record JSON, bounded (MAX_IMAGES_PER_ORG) so what one
 * organization publishes cannot grow Redis without limit. The image itself lives in the team's
 * registry; this is only what the platform was told was pushed there. Everything is addressed
 * within one organization, so another organization's images are not found, not refused.
 */
import { PlatformError } from "../contracts/errors.ts";
import type { Control } from "../redis/connection.ts";
import { LuaScript } from "../redis/scripts.ts";
import { parseStored } from "../redis/stored.ts";
import { ImageRecord } from "./record.ts";

const recordScript = new LuaScript(import.meta.url, "record");

/**
 * Images (service and tag pairs) an organization may hold. Records are small (under 1 KB), so the
 * bound is about Redis's memory, not the registry's disk: ten thousand is years of daily publishes
 * of a few services. Raising it is a code change on purpose; nothing deletes records yet.
 */
export const MAX_IMAGES_PER_ORG = 10_000;

const field = (service: string, tag: string) => `${service}:${tag}`;

export type RecordOutcome = { record: ImageRecord; replaced: boolean };

export async function recordImage(
  ctl: Control,
  record: ImageRecord,
  limit: number = MAX_IMAGES_PER_ORG,
): Promise<RecordOutcome> {
  const outcome = await recordScript.run(
    ctl.redis,
    [ctl.keys.images(record.org)],
    [field(record.service, record.tag), JSON.stringify(ImageRecord.parse(record)), limit],
  );
  if (outcome === "too_many")
    throw new PlatformError(
      409,
      "image_limit_reached",
      `the platform records at most ${limit} images per organization; ask the operator to clear old ones`,
    );
  return { record, replaced: outcome === "replaced" };
}

/** The organization's images, newest first; `service` narrows them to one service. */
export async function listImages(ctl: Control, org: string, service?: string): Promise<ImageRecord[]> {
  const key = ctl.keys.images(org);
  return Object.entries(await ctl.redis.hgetall(key))
    .filter(([name]) => service === undefined || name.startsWith(`${service}:`))
    .flatMap(([name, raw]) => {
      const parsed = parseStored(ImageRecord, raw, "image", `${key}/${name}`);
      return parsed.ok ? [parsed.value] : [];
    })
    .sort((a, b) => b.created - a.created || a.service.localeCompare(b.service) || b.tag.localeCompare(a.tag));
}

/** One image by service and tag; a 404 for one the organization never published. */
export async function getImage(ctl: Control, org: string, service: string, tag: string): Promise<ImageRecord> {
  const key = ctl.keys.images(org);
  const raw = await ctl.redis.hget(key, field(service, tag));
  const parsed = raw === null ? undefined : parseStored(ImageRecord, raw, "image", `${key}/${field(service, tag)}`);
  if (!parsed?.ok)
    throw new PlatformError(
      404,
      "image_not_found",
      `no image ${service}:${tag} was published in your organization; \`platform images list\` shows what was, \`platform publish\` publishes one`,
      "tag",
    );
  return parsed.value;
}
