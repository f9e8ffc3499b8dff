/** The storage section: how to reach S3 (or an S3-compatible service), from the usual AWS variables. */
import { z } from "zod";
import type { S3Settings } from "../storage/s3-settings.ts";
import { optional } from "./parse.ts";

export const storageShape = {
  AWS_REGION: optional(z.string()),
  AWS_DEFAULT_REGION: optional(z.string()),
  AWS_ENDPOINT_URL_S3: optional(z.url({ message: "expected the S3 endpoint's URL, e.g. http://127.0.0.1:9000" })),
  AWS_ENDPOINT_URL: optional(z.url({ message: "expected the endpoint's URL, e.g. http://127.0.0.1:9000" })),
  AWS_ACCESS_KEY_ID: optional(z.string()),
  AWS_SECRET_ACCESS_KEY: optional(z.string()),
  AWS_SESSION_TOKEN: optional(z.string()),
  PLATFORM_S3_FORCE_PATH_STYLE: z
    .enum(["true", "false", "1", "0", ""], { message: 'expected "true" or "false"' })
    .optional()
    .transform((value) => value === "true" || value === "1"),
};

type StorageEnv = z.infer<z.ZodObject<typeof storageShape>>;

export type StorageSettings = { s3: S3Settings };

/** A key id without its secret (or the reverse) is a half-configured credential, not "use the SDK's chain". */
export function checkStorage(e: StorageEnv, ctx: z.RefinementCtx): void {
  if ((e.AWS_ACCESS_KEY_ID === undefined) !== (e.AWS_SECRET_ACCESS_KEY === undefined)) {
    ctx.addIssue({
      code: "custom",
      message: "set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither",
      path: ["AWS_SECRET_ACCESS_KEY"],
    });
  }
}

export function storageSettings(e: StorageEnv): StorageSettings {
  const s3: S3Settings = {
    region: e.AWS_REGION ?? e.AWS_DEFAULT_REGION ?? "us-east-1",
    forcePathStyle: e.PLATFORM_S3_FORCE_PATH_STYLE,
  };
  const endpoint = e.AWS_ENDPOINT_URL_S3 ?? e.AWS_ENDPOINT_URL;
  if (endpoint !== undefined) s3.endpoint = endpoint;
  if (e.AWS_ACCESS_KEY_ID !== undefined && e.AWS_SECRET_ACCESS_KEY !== undefined) {
    s3.accessKeyId = e.AWS_ACCESS_KEY_ID;
    s3.secretAccessKey = e.AWS_SECRET_ACCESS_KEY;
    if (e.AWS_SESSION_TOKEN !== undefined) s3.sessionToken = e.AWS_SESSION_TOKEN;
  }
  return { s3 };
}
