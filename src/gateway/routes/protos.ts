/**
 * The proto catalog under /admin/v1/protos (docs/protos.md). Every route works within the
 * caller's organization: another organization's packages are not there to find (404, absent from
 * lists), for its admins and for operators too. Any key or token of the organization may publish,
 * not only admins: publishing is part of shipping a service, and it cannot destroy anything, as
 * versions never change and none is deleted.
 *
 *   GET  /                                          → {data: [packages]}, by name
 *   POST /:package/versions                         {version, image (base64), files: [{path, content}], allow_breaking?} → 201 the version
 *   GET  /:package/versions                         → {data: [versions]}, the highest first
 *   GET  /:package/versions/:version                → the version, with its services, RPCs, messages and enums (`latest`: the highest)
 *   GET  /:package/versions/:version/image          → the image: a binary FileDescriptorSet with source info
 *   GET  /:package/versions/:version/files/<path>   → one source file
 */
import { Readable } from "node:stream";
import { type Context, Hono } from "hono";
import { z } from "zod";
import { PlatformError } from "../../contracts/errors.ts";
import { ProtoFilePath, ProtoPackageName, ProtoVersionName } from "../../protos/names.ts";
import { publicVersion } from "../../protos/record.ts";
import {
  describeVersion,
  getVersion,
  listPackages,
  listVersions,
  type ProtoCatalog,
  publishVersion,
  readDescriptorSet,
  readSource,
} from "../../protos/store.ts";
import type { GatewayEnv } from "../env.ts";
import { parseBody, pathParam } from "../errors.ts";

export const PublishBody = z
  .object({
    version: ProtoVersionName,
    image: z
      .string()
      .min(1)
      .regex(/^[A-Za-z0-9+/]*={0,2}$/, "expected the image's bytes in base64"),
    files: z
      .array(z.object({ path: ProtoFilePath, content: z.string() }).strict())
      .min(1)
      .max(1000),
    allow_breaking: z.boolean().default(false),
  })
  .strict();

/** The source path after `/files/`, decoded; "" where it does not decode (refused by the caller's check). */
function fileParam(requestPath: string): string {
  const raw = /\/versions\/[^/]+\/files\/(.+)$/.exec(requestPath)?.[1] ?? "";
  try {
    return decodeURIComponent(raw);
  } catch {
    return "";
  }
}

const VersionParam = z.union([z.literal("latest"), ProtoVersionName]);

export function protoRoutes(reg: ProtoCatalog) {
  const app = new Hono<GatewayEnv>();
  const versionOf = (c: Context<GatewayEnv>) =>
    getVersion(
      reg,
      c.get("caller").org,
      pathParam(c, "package", ProtoPackageName),
      pathParam(c, "version", VersionParam),
    );

  app.get("/", async (c) => c.json({ data: await listPackages(reg, c.get("caller").org) }));

  app.post("/:package/versions", async (c) => {
    const pkg = pathParam(c, "package", ProtoPackageName);
    const body = await parseBody(c, PublishBody);
    const caller = c.get("caller");
    const record = await publishVersion(
      reg,
      caller.org,
      { id: caller.id, name: caller.name },
      {
        package: pkg,
        version: body.version,
        image: Buffer.from(body.image, "base64"),
        files: body.files,
        allowBreaking: body.allow_breaking,
      },
    );
    return c.json(publicVersion(record), 201);
  });

  app.get("/:package/versions", async (c) => {
    const versions = await listVersions(reg, c.get("caller").org, pathParam(c, "package", ProtoPackageName));
    return c.json({ data: versions.map(publicVersion) });
  });

  app.get("/:package/versions/:version", async (c) => {
    const record = await versionOf(c);
    const { services, messages, enums } = await describeVersion(reg, record);
    return c.json({ ...publicVersion(record), services, messages, enums });
  });

  app.get("/:package/versions/:version/image", async (c) => {
    const record = await versionOf(c);
    return c.body(new Uint8Array(await readDescriptorSet(reg, record)), 200, {
      "content-type": "application/octet-stream",
      "content-disposition": `attachment; filename="${record.package}-${record.version}.binpb"`,
      etag: `"${record.image.sha256}"`,
    });
  });

  app.get("/:package/versions/:version/files/*", async (c) => {
    const record = await versionOf(c);
    const path = ProtoFilePath.safeParse(fileParam(c.req.path));
    if (!path.success)
      throw new PlatformError(400, "invalid_request", `path: ${path.error.issues[0]?.message}`, "path");
    const stream = await readSource(reg, record, path.data);
    return c.body(Readable.toWeb(stream) as ReadableStream, 200, { "content-type": "text/plain; charset=utf-8" });
  });

  return app;
}
