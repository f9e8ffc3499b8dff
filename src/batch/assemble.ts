/**
 * A batch job's output from its parts, once its records are written (run.ts `finish`): the
 * parts concatenated into the result, or for a format that keeps failures apart (the OpenAI
 * shape) the answers and the failures into two objects; those recorded as /v1/files shows them;
 * then the parts removed. Every step judges the storage again first (run-checks.ts).
 */
import type { Control } from "../redis/connection.ts";
import { isStorageError } from "../storage/index.ts";
import type { StoragePolicy } from "../storage/policy.ts";
import { type BatchResultFiles, registerResultFiles, type ResultObject } from "../files/store.ts";
import { type OutputLocation, selectLines, withStorageRetries } from "./output.ts";
import { BatchFailure } from "./prepare.ts";
import { checkParts, checkUris } from "./run-checks.ts";
import type { BatchSpec } from "./store.ts";

export type AssemblyDeps = {
  ctl: Control;
  spec: BatchSpec;
  storage: StoragePolicy;
  out: OutputLocation;
  /** An earlier run marked the result as being placed (the checkpoint's `assembling`). */
  assembling: boolean;
  /** Records that mark before the result is placed. */
  markAssembling: () => Promise<void>;
};

export class OutputAssembly {
  private readonly deps: AssemblyDeps;

  constructor(deps: AssemblyDeps) {
    this.deps = deps;
  }

  /**
   * The parts into the output: one result, or (`failed` given: the format keeps failures apart)
   * the answers and the failures apart.
   */
  async assemble(parts: string[], failed: ((line: string) => boolean) | undefined): Promise<void> {
    // The assembly reads the parts: through a link it would copy what the link leads to.
    await checkParts(this.deps.spec, this.deps.storage, this.deps.out);
    if (failed) await this.assembleApart(parts, failed);
    else await this.assembleWhole(parts);
  }

  /** Every line into the one result, which an existing object is never silently replaced by. */
  private async assembleWhole(parts: string[]): Promise<void> {
    const { spec, storage, out } = this.deps;
    const overwrite = spec.overwrite === true;
    if (!overwrite && !(await this.assembledBefore(parts))) {
      await checkUris(spec, storage);
      // Marked first: a run that dies after placing the result finds it its own (assembledBefore).
      await this.deps.markAssembling();
      try {
        await withStorageRetries(() => out.store.concat(parts, out.resultKey, { overwrite: false }));
      } catch (e) {
        if (isStorageError(e, "exists")) {
          throw new BatchFailure(
            "output_exists",
            `${out.store.uri(out.resultKey)}: an object already exists there and the job may not replace it (submit with "overwrite": true to allow that); the completed records are kept`,
          );
        }
        if (isStorageError(e)) throw new BatchFailure("output_not_writable", e.message);
        throw e;
      }
    } else if (overwrite) {
      await checkUris(spec, storage);
      try {
        await withStorageRetries(() => out.store.concat(parts, out.resultKey));
      } catch (e) {
        if (isStorageError(e)) throw new BatchFailure("output_not_writable", e.message);
        throw e;
      }
    }
  }

  /**
   * A format that keeps failures apart (the OpenAI shape): answers into the
   * result, failures into the error object, each in input order; no error
   * object when nothing failed. Both are the server's own objects named by
   * the job id (the shape's output is always files/), so a run that redoes
   * this after dying before the checkpoint recorded it replaces them with the
   * same bytes from the same parts, and put() is atomic: no `overwrite` to honour.
   */
  private async assembleApart(parts: string[], failed: (line: string) => boolean): Promise<void> {
    const { out } = this.deps;
    await checkUris(this.deps.spec, this.deps.storage);
    try {
      // The answers' pass counts the failures it leaves out; a retried pass counts afresh.
      let failures = { count: 0 };
      await withStorageRetries(() => {
        failures = { count: 0 };
        return out.store.put(
          out.resultKey,
          selectLines(out.store, parts, (line) => !failed(line), failures),
        );
      });
      if (failures.count > 0)
        await withStorageRetries(() =>
          out.store.put(out.errorKey, selectLines(out.store, parts, failed, { count: 0 })),
        );
    } catch (e) {
      if (isStorageError(e)) throw new BatchFailure("output_not_writable", e.message);
      throw e;
    }
  }

  /**
   * The output and error files as /v1/files shows them: each only when it
   * holds a line (OpenAI's ids are null otherwise). Judged by the objects
   * themselves, so a run that finds the assembly already done records the same.
   */
  async registerFiles(): Promise<BatchResultFiles> {
    const { ctl, spec, out } = this.deps;
    const sized = async (key: string): Promise<ResultObject | null> => {
      const head = await withStorageRetries(() => out.store.head(key)).catch((e: unknown) => {
        if (isStorageError(e)) throw new BatchFailure("storage_error", e.message);
        throw e;
      });
      return head && head.size > 0 ? { key, bytes: head.size } : null;
    };
    return registerResultFiles(
      ctl,
      { id: spec.id, owner: spec.created_by, org: spec.org, finished: Date.now() },
      { output: await sized(out.resultKey), errors: await sized(out.errorKey) },
    );
  }

  /** The result is in place from an earlier run of this job that stopped before recording it. */
  private async assembledBefore(parts: string[]): Promise<boolean> {
    if (!this.deps.assembling) return false;
    const { out } = this.deps;
    const existing = await out.store.head(out.resultKey).catch(() => null);
    if (existing === null) return false;
    let size = 0;
    for (const key of parts) size += (await out.store.head(key))?.size ?? Number.NaN;
    return size === existing.size;
  }

  /**
   * Best effort: what is left is only clutter. A parts directory that is a
   * link, or no longer the one this run held, is left alone: deleting through
   * it could delete what it leads to.
   */
  async removeParts(parts: string[]): Promise<void> {
    const { spec, storage, out } = this.deps;
    if (
      !(await checkParts(spec, storage, out).then(
        () => true,
        () => false,
      ))
    )
      return;
    // Local: everything in the directory (the parts, and the temp file of a part whose writer was
    // killed mid-write) goes through the held handle, then the directory itself.
    await out.clearParts().catch(() => undefined);
    for (let i = 0; i < parts.length; i += 100) {
      await Promise.all(parts.slice(i, i + 100).map((key) => out.store.delete(key).catch(() => undefined)));
    }
  }
}
