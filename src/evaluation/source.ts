/**
 * Reading a dataset whole, as batch reads its inputs (src/batch/prepare.ts): a local file through
 * one handle whose identity is the object the storage policy judged. Errors name the dataset as the
 * client gave it, never where it really is.
 */
import { PlatformError } from "../contracts/errors.ts";
import { BatchFailure, closeInput, openInput, readInput } from "../batch/prepare.ts";
import type { S3Settings } from "../storage/index.ts";
import { MAX_DATASET_BYTES } from "./dataset.ts";

export async function readDatasetBytes(
  uri: string,
  identity: string | undefined,
  given: string,
  s3: S3Settings,
): Promise<Buffer> {
  try {
    const input = await openInput(uri, identity, given, s3);
    try {
      if (input.size > MAX_DATASET_BYTES)
        throw new PlatformError(
          413,
          "dataset_too_large",
          `dataset: ${given} is ${input.size} bytes, more than ${MAX_DATASET_BYTES}; split it into smaller evaluations`,
          "dataset",
        );
      const parts: Buffer[] = [];
      for await (const chunk of readInput(input, 0)) parts.push(chunk);
      return Buffer.concat(parts);
    } finally {
      await closeInput(input);
      input.store.close();
    }
  } catch (e) {
    if (e instanceof BatchFailure) {
      const status = e.code === "input_not_found" ? 404 : e.code === "input_changed" ? 409 : 503;
      const why =
        e.code === "input_not_found"
          ? "no such object"
          : e.code === "input_changed"
            ? "it changed after it was checked; try again"
            : "it could not be read";
      throw new PlatformError(
        status,
        `dataset_${e.code.replace(/^input_/, "")}`,
        `dataset: ${given}: ${why}`,
        "dataset",
      );
    }
    throw e;
  }
}
