/**
 * Reading a batch job's results back (GET /v1/batch-jobs/<id>/output): the result object of a
 * finished job, or the parts written so far, in order, of a failed, cancelled or running one; and an
 * image job's PNGs, by the name its output lines give (GET /v1/batch-jobs/<id>/output/<name>).
 */
import { Readable } from "node:stream";
import { PlatformError } from "../contracts/errors.ts";
import type { Control } from "../redis/connection.ts";
import { StorageError } from "../storage/index.ts";
import type { StoragePolicy } from "../storage/policy.ts";
import { readParts } from "../storage/shared.ts";
import { PICTURE_REFERENCE, pictureOutputKey, pictureReference } from "./picture-records.ts";
import { type OutputLocation, outputLocation } from "./output.ts";
import { type BatchJob, BatchCheckpoint } from "./record.ts";
import { type BatchSpec, outputUri, readSpec, scopeViewer, showPaths } from "./store.ts";

/** The job's output location, confined again, with how its storage errors are shown. */
async function openOutput(
  storage: StoragePolicy,
  spec: BatchSpec,
  id: string,
): Promise<{ out: OutputLocation; shown: (e: unknown) => unknown }> {
  // Judged again, as the coordinator does before every run: the owner may have replaced a
  // directory on the way with a link (to another tenant's area) since the job wrote there.
  if (spec.scope?.output) await storage.confine(outputUri(spec), scopeViewer(spec.scope), "output");
  const out = outputLocation(outputUri(spec), id, storage.s3);
  const shown = (e: unknown) => {
    out.store.close();
    if (e instanceof StorageError)
      return new PlatformError(
        e.code === "not_found" ? 404 : 503,
        e.code === "not_found" ? "output_not_found" : "storage_error",
        showPaths(spec, e.message),
      );
    return e;
  };
  return { out, shown };
}

/**
 * One PNG of an image job, by the name its output line gives (`<result's name>/<record id>.png`,
 * relative to the result): a name of any other shape, or one that is not there, is a 404.
 */
export async function readOutputPicture(
  ctl: Control,
  storage: StoragePolicy,
  record: BatchJob,
  name: string,
): Promise<Readable> {
  const notFound = () =>
    new PlatformError(
      404,
      "output_not_found",
      `batch job ${record.id} has no image ${JSON.stringify(name.slice(0, 300))}`,
      "name",
    );
  // A name of the wrong shape is refused before any storage is touched.
  if (!PICTURE_REFERENCE.test(name)) throw notFound();
  const spec = (await readSpec(ctl, record.id)) as BatchSpec;
  const { out, shown } = await openOutput(storage, spec, record.id);
  const id = name.slice(name.indexOf("/") + 1, -".png".length);
  if (pictureReference(out.resultKey, id) !== name) {
    out.store.close();
    throw notFound();
  }
  try {
    const stream = await out.store.get(pictureOutputKey(out.resultKey, id));
    stream.once("close", () => out.store.close());
    return stream;
  } catch (e) {
    throw shown(e);
  }
}

/** `record`: the job, already found visible to whoever asks. */
export async function readOutput(ctl: Control, storage: StoragePolicy, record: BatchJob): Promise<Readable> {
  const spec = (await readSpec(ctl, record.id)) as BatchSpec;
  const { out, shown } = await openOutput(storage, spec, record.id);
  const raw = await ctl.redis.get(ctl.keys.batchCheckpoint(record.id));
  const checkpoint = raw ? BatchCheckpoint.parse(JSON.parse(raw)) : undefined;
  if (record.output_file !== null || checkpoint?.assembled) {
    try {
      const stream = await out.store.get(out.resultKey);
      stream.once("close", () => out.store.close());
      return stream;
    } catch (e) {
      throw shown(e);
    }
  }
  const parts = checkpoint?.parts ?? 0;
  if (parts === 0) {
    out.store.close();
    throw new PlatformError(
      404,
      "no_output",
      `batch job ${record.id} (${record.state}) has no completed records yet`,
      "id",
    );
  }
  const keys = Array.from({ length: parts }, (_, i) => out.partKey(i));
  // The first part is opened here, so a missing part is an HTTP error rather than a cut stream.
  try {
    (await out.store.get(keys[0] as string)).destroy();
  } catch (e) {
    throw shown(e);
  }
  return Readable.from(
    (async function* () {
      try {
        yield* readParts(out.store, keys);
      } finally {
        out.store.close();
      }
    })(),
  );
}
