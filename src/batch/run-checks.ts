/**
 * The storage checks a batch run makes again and again (run.ts, assemble.ts): the client-named
 * URIs against the roots as configured now, and the parts directory before every part written,
 * the assembly and the clean-up (a client can write in its output directory too). Their failures
 * as the job reports them.
 */
import { PlatformError } from "../contracts/errors.ts";
import { isStorageError } from "../storage/index.ts";
import type { ConfinedUri, StoragePolicy } from "../storage/policy.ts";
import type { OutputLocation } from "./output.ts";
import { BatchFailure } from "./prepare.ts";
import { type BatchSpec, inputUri, outputUri, scopeViewer } from "./store.ts";

/**
 * The client-named URIs are checked again on every run: the roots may have
 * changed, or a symlink been planted, since the job was created. Returns
 * the input as judged (where it really is now, and its identity).
 */
export async function checkUris(spec: BatchSpec, storage: StoragePolicy): Promise<ConfinedUri | undefined> {
  const scope = spec.scope;
  if (!scope) return undefined;
  const viewer = scopeViewer(scope);
  try {
    const input = scope.input ? await storage.confine(inputUri(spec), viewer, "input") : undefined;
    if (scope.output) await storage.confine(outputUri(spec), viewer, "output");
    return input;
  } catch (e) {
    if (e instanceof PlatformError)
      throw new BatchFailure(e.code === "storage_forbidden" ? "storage_forbidden" : "storage_error", e.message);
    throw e;
  }
}

/**
 * The parts directory must be the job's own: not a link, still the
 * directory held, and for a client-named output inside the key's areas
 * (a directory above it may have been swapped for a link).
 */
export async function checkParts(spec: BatchSpec, storage: StoragePolicy, out: OutputLocation): Promise<void> {
  try {
    await out.checkParts();
    const scope = spec.scope;
    if (scope?.output) {
      try {
        await storage.confine(out.partsUri, scopeViewer(scope), "output");
      } catch (e) {
        // Replaced between the two checks (a file where the directory was): that is the failure to report.
        await out.checkParts();
        throw e;
      }
    }
  } catch (e) {
    if (isStorageError(e)) throw new BatchFailure("output_not_writable", e.message);
    if (e instanceof PlatformError)
      throw new BatchFailure(e.code === "storage_forbidden" ? "storage_forbidden" : "storage_error", e.message);
    throw e;
  }
}

/** A failure the job reports (and may be resumed from); undefined for one BullMQ retries. */
export function asFailure(e: unknown): BatchFailure | undefined {
  if (e instanceof BatchFailure) return e;
  if (isStorageError(e)) return new BatchFailure("storage_error", e.message);
  return undefined;
}
