/** How to reach S3 (or an S3-compatible service); read from the AWS variables by src/settings/storage.ts. */
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
