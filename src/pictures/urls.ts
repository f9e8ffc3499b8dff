/**
 * `url` answers of /v1/images/generations (docs/images.md): the image stays in the artifact store,
 * named by a random id recorded in Redis with its owner and a TTL; the gateway serves it at
 * /v1/images/files/<id>.png to its owner (or an admin of its organization, or an operator) until it
 * expires, and answers 404 otherwise, as batch files are confined. Images nobody took are swept by age.
 */
import { randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import { z } from "zod";
import { PlatformError } from "../contracts/errors.ts";
import { canSee, type Principal } from "../contracts/orgs.ts";
import type { Control } from "../redis/connection.ts";
import type { ObjectStore } from "../storage/store.ts";
import { hourOf, PICTURES_PREFIX, isPictureKey } from "./keys.ts";

const ImageUrlRecord = z.object({
  key: z.string(),
  owner: z.string().nullable(),
  org: z.string(),
  expires: z.number().int(),
});

/** An id as the route takes it: `img-` and 32 hex digits. */
export const PICTURE_ID = /^img-[0-9a-f]{32}$/;

/** Keeps the image at `key` for a `url` answer; its id, valid for `ttlMs`. */
export async function keepForUrl(
  ctl: Control,
  image: { key: string; owner: Principal | undefined },
  ttlMs: number,
  now = Date.now(),
): Promise<{ id: string; expires: number }> {
  const id = `img-${randomBytes(16).toString("hex")}`;
  const expires = now + ttlMs;
  const record = { key: image.key, owner: image.owner?.id ?? null, org: image.owner?.org ?? "default", expires };
  await ctl.redis.set(ctl.keys.imageUrl(id), JSON.stringify(record), "PX", ttlMs);
  return { id, expires };
}

/** The image `id` names, for `viewer`; a 404 when it never existed, expired, or is another's. */
export async function openPicture(ctl: Control, store: ObjectStore, id: string, viewer: Principal): Promise<Readable> {
  const missing = new PlatformError(
    404,
    "not_found",
    "no such image: image URLs expire (PLATFORM_IMAGES_URL_TTL_MS) and are served to the key that made them",
  );
  if (!PICTURE_ID.test(id)) throw missing;
  const raw = await ctl.redis.get(ctl.keys.imageUrl(id));
  const parsed = raw === null ? undefined : ImageUrlRecord.safeParse(JSON.parse(raw)).data;
  if (!parsed || parsed.expires < Date.now() || !isPictureKey(parsed.key)) throw missing;
  if (!canSee(viewer, { id: parsed.owner, org: parsed.org })) throw missing;
  return store.get(parsed.key);
}

/** Reads a worker's PNG whole (b64_json answers); the key is checked, as it came from a job result. */
export async function readPicture(store: ObjectStore, key: string): Promise<Buffer> {
  if (!isPictureKey(key)) throw new PlatformError(500, "internal_error", "the worker named an image outside images/");
  const chunks: Buffer[] = [];
  for await (const chunk of await store.get(key)) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/**
 * Removes images older than `ttlMs` plus an hour (their hour bucket ended before any URL to them
 * could still be valid). Keys list oldest hour first, so the walk stops at the first one still kept.
 */
export async function sweepPictures(store: ObjectStore, ttlMs: number, now = Date.now()): Promise<number> {
  let removed = 0;
  for await (const o of store.list(`${PICTURES_PREFIX}/`)) {
    const hour = hourOf(o.key);
    if (hour === undefined) continue;
    if (hour + 3_600_000 + ttlMs >= now) break;
    await store.delete(o.key);
    removed++;
  }
  return removed;
}
