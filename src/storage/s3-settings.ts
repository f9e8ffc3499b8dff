/** How to reach S3 (or an S3-compatible service), from the usual AWS environment. */
import { z } from "zod";
import { describeIssues } from "../contracts/deployment.ts";

export type S3Settings = {
  /** Default "us-east-1". */
  region?: string;
  /** e.g. http://127.0.0.1:9000 for MinIO; absent for AWS itself. */
  endpoint?: string;
  /** Address buckets as /bucket/key instead of bucket.host: most S3-compatible services need it. */
  forcePathStyle?: boolean;
  /** Absent: the SDK's default chain (env, shared config, instance role...). */
  accessKeyId?: string;
  secretAccessKey?: string;
  sessionToken?: string;
  /** Attempts per request including retries (SDK default 3). */
  maxAttempts?: number;
};

const optional = <T extends z.ZodType>(schema: T) =>
  z.preprocess((value) => (value === "" ? undefined : value), schema.optional());

const flag = z
  .enum(["true", "false", "1", "0", ""], { message: 'expected "true" or "false"' })
  .optional()
  .transform((value) => value === "true" || value === "1");

const Env = z
  .object({
    AWS_REGION: optional(z.string()),
    AWS_DEFAULT_REGION: optional(z.string()),
    AWS_ENDPOINT_URL_S3: optional(z.url()),
    AWS_ENDPOINT_URL: optional(z.url()),
    AWS_ACCESS_KEY_ID: optional(z.string()),
    AWS_SECRET_ACCESS_KEY: optional(z.string()),
    AWS_SESSION_TOKEN: optional(z.string()),
    PLATFORM_S3_FORCE_PATH_STYLE: flag,
  })
  .refine((e) => (e.AWS_ACCESS_KEY_ID === undefined) === (e.AWS_SECRET_ACCESS_KEY === undefined), {
    message: "set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither",
    path: ["AWS_SECRET_ACCESS_KEY"],
  });

export function s3SettingsFromEnv(env: NodeJS.ProcessEnv = process.env): S3Settings {
  const parsed = Env.safeParse(env);
  if (!parsed.success) throw new Error(`invalid environment: ${describeIssues(parsed.error)}`);
  const e = parsed.data;
  const settings: S3Settings = {
    region: e.AWS_REGION ?? e.AWS_DEFAULT_REGION ?? "us-east-1",
    forcePathStyle: e.PLATFORM_S3_FORCE_PATH_STYLE,
  };
  const endpoint = e.AWS_ENDPOINT_URL_S3 ?? e.AWS_ENDPOINT_URL;
  if (endpoint !== undefined) settings.endpoint = endpoint;
  if (e.AWS_ACCESS_KEY_ID !== undefined && e.AWS_SECRET_ACCESS_KEY !== undefined) {
    settings.accessKeyId = e.AWS_ACCESS_KEY_ID;
    settings.secretAccessKey = e.AWS_SECRET_ACCESS_KEY;
    if (e.AWS_SESSION_TOKEN !== undefined) settings.sessionToken = e.AWS_SESSION_TOKEN;
  }
  return settings;
}
