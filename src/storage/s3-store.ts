/**
 * The S3 store: AWS S3 or any S3-compatible service (MinIO, Ceph, R2, s3rver).
 * The AWS SDK (~30 MiB resident) loads on the first call that needs it, so a
 * process that only ever uses local directories never pays for it.
 */
import type { S3Client, S3ClientConfig } from "@aws-sdk/client-s3";
import { resolve } from "node:path";
import { Readable } from "node:stream";
import { fromS3Error, StorageError } from "./errors.ts";
import type { S3Settings } from "./s3-settings.ts";
import { discard, rangeStart, readParts, Tap, writeFileAtomically } from "./shared.ts";
import type { Body, ObjectInfo, ObjectStore } from "./store.ts";
import { checkObjectKey, checkPrefix, fileUrl, joinKey, s3Url } from "./uri.ts";
import type { S3Location } from "./uri.ts";

export class S3Store implements ObjectStore {
  readonly url: string;
  readonly bucket: string;
  /** Key prefix of the root inside the bucket ("" for the whole bucket). */
  readonly prefix: string;
  private readonly settings: S3Settings;
  private readonly endpoint: string | undefined;
  private connection: Promise<{ sdk: Sdk; client: S3Client }> | undefined;
  private closed = false;

  constructor(location: S3Location, settings: S3Settings = {}) {
    this.bucket = location.bucket;
    this.prefix = location.key;
    this.url = location.url;
    this.settings = settings;
    this.endpoint = settings.endpoint;
  }

  /** The SDK and this store's client, loaded and made on first use. */
  private s3(): Promise<{ sdk: Sdk; client: S3Client }> {
    if (this.closed) throw new StorageError("unavailable", this.url, `${this.url}: the store is closed`);
    this.connection ??= loadSdk().then((sdk) => ({ sdk, client: new sdk.S3Client(clientConfig(this.settings)) }));
    return this.connection;
  }

  uri(key: string): string {
    return s3Url(this.bucket, this.fullKey(key));
  }

  localPath(): undefined {
    return undefined;
  }

  async put(key: string, body: Body): Promise<{ size: number }> {
    let fullKey: string;
    try {
      fullKey = this.fullKey(key);
    } catch (error) {
      discard(body);
      throw error;
    }
    return { size: await this.upload(fullKey, body) };
  }

  async get(key: string, range?: { start: number }): Promise<Readable> {
    const start = rangeStart(range);
    const fullKey = this.fullKey(key);
    try {
      // No Range header from 0: some servers mishandle "bytes=0-" on an empty object.
      const { sdk, client } = await this.s3();
      const command = new sdk.GetObjectCommand({
        Bucket: this.bucket,
        Key: fullKey,
        ...(start > 0 ? { Range: `bytes=${start}-` } : {}),
      });
      const response = await client.send(command);
      if (!(response.Body instanceof Readable)) throw new Error("expected a Node.js stream body");
      return response.Body;
    } catch (error) {
      // 416 only comes back for an existing object read from at or past its end.
      if (errorName(error) === "InvalidRange") return Readable.from([]);
      throw this.mapError(error, fullKey);
    }
  }

  async head(key: string): Promise<{ size: number } | null> {
    const fullKey = this.fullKey(key);
    try {
      const { sdk, client } = await this.s3();
      const response = await client.send(new sdk.HeadObjectCommand({ Bucket: this.bucket, Key: fullKey }));
      return { size: response.ContentLength ?? 0 };
    } catch (error) {
      const mapped = this.mapError(error, fullKey);
      if (mapped.code !== "not_found") throw mapped;
      // A HEAD 404 has no body, so a missing bucket looks like a missing key: ask.
      await this.checkBucket(fullKey);
      return null;
    }
  }

  async *list(prefix = ""): AsyncGenerator<ObjectInfo> {
    checkPrefix(prefix, this.url);
    const rootPrefix = this.prefix === "" ? "" : `${this.prefix}/`;
    try {
      const { sdk, client } = await this.s3();
      const pages = sdk.paginateListObjectsV2({ client }, { Bucket: this.bucket, Prefix: rootPrefix + prefix });
      for await (const page of pages) {
        for (const object of page.Contents ?? []) {
          const key = object.Key?.slice(rootPrefix.length);
          // Keys ending in "/" are console "folder" markers, not objects.
          if (key === undefined || key === "" || key.endsWith("/")) continue;
          yield { key, size: object.Size ?? 0 };
        }
      }
    } catch (error) {
      throw this.mapError(error, rootPrefix + prefix);
    }
  }

  async delete(key: string): Promise<void> {
    const fullKey = this.fullKey(key);
    try {
      const { sdk, client } = await this.s3();
      await client.send(new sdk.DeleteObjectCommand({ Bucket: this.bucket, Key: fullKey }));
    } catch (error) {
      throw this.mapError(error, fullKey);
    }
  }

  /**
   * Streams the parts through this process into one multipart upload. Server-side
   * UploadPartCopy would avoid the round trip but needs every part but the last
   * to be at least 5 MiB, which batch output parts rarely are.
   */
  async concat(
    partKeys: readonly string[],
    destKey: string,
    options: { overwrite?: boolean } = {},
  ): Promise<{ size: number }> {
    for (const key of partKeys) checkObjectKey(key, this.url);
    // S3 has no portable create-only write (If-None-Match is recent and not everywhere): HEAD first.
    if (options.overwrite === false && (await this.head(destKey)) !== null) {
      const uri = this.uri(destKey);
      throw new StorageError("exists", uri, `${uri}: an object already exists there`);
    }
    return { size: await this.upload(this.fullKey(destKey), readParts(this, partKeys)) };
  }

  async download(key: string, destPath: string): Promise<void> {
    const dest = resolve(destPath);
    const source = await this.get(key);
    await writeFileAtomically(dest, source, fileUrl(dest));
  }

  close(): void {
    this.closed = true;
    void this.connection?.then(
      ({ client }) => client.destroy(),
      () => undefined,
    );
  }

  /** lib-storage sends one PutObject below its 5 MiB part size, a multipart upload above. */
  private async upload(fullKey: string, body: Body): Promise<number> {
    const tap = new Tap();
    const stream = Readable.from(tap.wrap(body));
    try {
      const { sdk, client } = await this.s3();
      await new sdk.Upload({ client, params: { Bucket: this.bucket, Key: fullKey, Body: stream } }).done();
    } catch (error) {
      stream.destroy();
      throw tap.blame(error, (e) => this.mapError(e, fullKey));
    }
    return tap.size;
  }

  private async checkBucket(fullKey: string): Promise<void> {
    try {
      const { sdk, client } = await this.s3();
      await client.send(new sdk.HeadBucketCommand({ Bucket: this.bucket }));
    } catch (error) {
      const mapped = this.mapError(error, fullKey);
      if (mapped.code === "not_found") {
        const uri = s3Url(this.bucket, fullKey);
        throw new StorageError("no_such_bucket", uri, `${uri}: no such bucket "${this.bucket}"`, error);
      }
      // Without s3:ListBucket we cannot tell; the object is missing either way.
    }
  }

  private mapError(error: unknown, fullKey: string): StorageError {
    return fromS3Error(error, s3Url(this.bucket, fullKey), this.bucket, this.endpoint);
  }

  private fullKey(key: string): string {
    return joinKey(this.prefix, checkObjectKey(key, this.url));
  }
}

type Sdk = typeof import("@aws-sdk/client-s3") & Pick<typeof import("@aws-sdk/lib-storage"), "Upload">;
let sdk: Promise<Sdk> | undefined;
function loadSdk(): Promise<Sdk> {
  sdk ??= Promise.all([import("@aws-sdk/client-s3"), import("@aws-sdk/lib-storage")]).then(([s3, storage]) => ({
    ...s3,
    Upload: storage.Upload,
  }));
  return sdk;
}

function clientConfig(settings: S3Settings): S3ClientConfig {
  const config: S3ClientConfig = {
    region: settings.region ?? "us-east-1",
    forcePathStyle: settings.forcePathStyle ?? false,
  };
  if (settings.endpoint !== undefined) {
    config.endpoint = settings.endpoint;
    // S3-compatible services differ in support for the SDK's newer default
    // integrity checksums; send them only where the API requires them.
    config.requestChecksumCalculation = "WHEN_REQUIRED";
    config.responseChecksumValidation = "WHEN_REQUIRED";
  }
  if (settings.accessKeyId !== undefined && settings.secretAccessKey !== undefined) {
    config.credentials = {
      accessKeyId: settings.accessKeyId,
      secretAccessKey: settings.secretAccessKey,
      ...(settings.sessionToken !== undefined ? { sessionToken: settings.sessionToken } : {}),
    };
  }
  if (settings.maxAttempts !== undefined) config.maxAttempts = settings.maxAttempts;
  return config;
}

function errorName(error: unknown): string | undefined {
  const name = (error as { name?: unknown } | null)?.name;
  return typeof name === "string" ? name : undefined;
}
