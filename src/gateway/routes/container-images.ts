/**
 * Image records under /admin/v1/images (docs/publish.md, "Image records"): what `platform publish`
 * pushed, so the dev center can refuse to deploy a tag that was never published. Every route works
 * within the caller's organization: another organization's images are not there to find (404,
 * absent from lists), for its admins and operators too. Any key or token of the organization may
 * record one, not only admins: publishing is part of shipping a service, like the proto catalog.
 *
 *   POST /                       {service, repository, tag, digest, git_sha, dirty, version, protos} → 201 the record (200 replacing the same tag)
 *   GET  /?service=<name>        → {data: [records]}, newest first
 *   GET  /:service/tags/:tag     → the record
 *
 * A repository on a registry the operator does not let tenants name (PLATFORM_IMAGE_REGISTRIES) is
 * a 403 `registry_not_allowed`.
 */
import { Hono } from "hono";
import { z } from "zod";
import { PlatformError } from "../../contracts/errors.ts";
import { GitSha, ImageDigest, ImageRepository, ImageServiceName, ImageTag } from "../../container-images/names.ts";
import { ImageRecord } from "../../container-images/record.ts";
import { checkRegistryHost, registryHostOf } from "../../container-images/registries.ts";
import { getImage, listImages, recordImage } from "../../container-images/store.ts";
import type { Control } from "../../redis/connection.ts";
import type { RegistryPolicy } from "../../settings/registries.ts";
import type { GatewayEnv } from "../env.ts";
import { parseBody, pathParam } from "../errors.ts";

export const RecordBody = z
  .object({
    service: ImageServiceName,
    repository: ImageRepository,
    tag: ImageTag,
    digest: ImageDigest,
    git_sha: GitSha,
    dirty: z.boolean({ message: "expected true or false: was the tree dirty when built" }),
    version: z.string().min(1, "expected the service's version").max(128, "expected at most 128 characters"),
    protos: ImageRecord.shape.protos,
  })
  .strict()
  .superRefine((body, ctx) => {
    // The repository names the service: a record cannot claim another repository's image.
    if (body.repository.split("/").at(-1) !== body.service)
      ctx.addIssue({
        code: "custom",
        path: ["service"],
        message: `expected the repository's last path component ("${body.repository.split("/").at(-1)}")`,
      });
  });

export function imageRoutes(ctl: Control, registries: RegistryPolicy) {
  const app = new Hono<GatewayEnv>();

  app.post("/", async (c) => {
    const body = await parseBody(c, RecordBody);
    checkRegistryHost(registryHostOf(body.repository), registries);
    const caller = c.get("caller");
    const { record, replaced } = await recordImage(ctl, {
      ...body,
      org: caller.org,
      created: Math.floor(Date.now() / 1000),
      published_by: { id: caller.id, name: caller.name },
    });
    return c.json(record, replaced ? 200 : 201);
  });

  app.get("/", async (c) => {
    const raw = c.req.query("service");
    let service: string | undefined;
    if (raw !== undefined) {
      const parsed = ImageServiceName.safeParse(raw);
      if (!parsed.success)
        throw new PlatformError(400, "invalid_request", `service: ${parsed.error.issues[0]?.message}`, "service");
      service = parsed.data;
    }
    return c.json({ data: await listImages(ctl, c.get("caller").org, service) });
  });

  app.get("/:service/tags/:tag", async (c) =>
    c.json(
      await getImage(
        ctl,
        c.get("caller").org,
        pathParam(c, "service", ImageServiceName),
        pathParam(c, "tag", ImageTag),
      ),
    ),
  );

  return app;
}
