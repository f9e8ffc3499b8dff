/**
 * An organization's image-pull credentials under /admin/v1/registry-credentials (docs/services.md,
 * "Pulling from a private registry"): the registries its deployed services' images are pulled
 * from. An admin of the organization sets and removes them; any caller of it lists them (host,
 * username, who and when: never the password) and asks which credential would pull a repository
 * (`platform doctor` does). Another organization's are not found.
 *
 *   GET    /                          → {data: [{host, username, updated, by}]}
 *   PUT    /:host  {username, password} → 201 (200 replacing) {host, username, updated, by}
 *   DELETE /:host                     → {deleted: true}; 404 registry_credential_not_found
 *   GET    /source?repository=<repo>  → {repository, host, source: organization|token_server|operator|none}
 *
 * A registry the operator does not let tenants name (PLATFORM_IMAGE_REGISTRIES) is a 403
 * `registry_not_allowed` on PUT and /source; /source probes a registry only through the guarded
 * resolver (src/container-images/registries.ts), so a tenant cannot aim it at loopback or internal addresses.
 */
import { Hono } from "hono";
import { z } from "zod";
import { PlatformError } from "../../contracts/errors.ts";
import { ImageRepository } from "../../container-images/names.ts";
import {
  checkRegistryHost,
  refusedRegistry,
  registryAddresses,
  registryHostOf,
} from "../../container-images/registries.ts";
import { resolveAllowed } from "../../outbound/guard.ts";
import { RegistryHost, RegistryPassword, RegistryUsername } from "../../registry-credentials/names.ts";
import { loadTokenKey } from "../../registry-credentials/grant.ts";
import { PullAuthResolver } from "../../registry-credentials/resolve.ts";
import { RegistryCredentials } from "../../registry-credentials/store.ts";
import type { Control } from "../../redis/connection.ts";
import type { SecretBox } from "../../services/secrets.ts";
import type { Settings } from "../../settings/index.ts";
import type { GatewayEnv } from "../env.ts";
import { parseBody, pathParam } from "../errors.ts";

const SetBody = z.object({ username: RegistryUsername, password: RegistryPassword }).strict();

export function registryCredentialRoutes(
  ctl: Control,
  settings: Pick<Settings, "services" | "registryToken" | "registries">,
  box: () => Promise<SecretBox>,
) {
  const credentials = new RegistryCredentials(ctl, box);
  const { keyFile, issuer } = settings.registryToken;
  // The scaler's question, asked the same way (scaler/start/services.ts), for `platform doctor`.
  const resolver = new PullAuthResolver({
    credentials,
    ...(keyFile ? { tokenKey: loadTokenKey(keyFile) } : {}),
    issuer,
    operatorFile: settings.services.pullAuthFile,
    registries: settings.registries,
  });
  const app = new Hono<GatewayEnv>();
  const admin = (role: string) => {
    if (role !== "admin")
      throw new PlatformError(
        403,
        "permission_denied",
        "only an admin of the organization sets or removes its registry credentials",
      );
  };

  app.get("/", async (c) => c.json({ data: await credentials.list(c.get("caller").org) }));

  app.get("/source", async (c) => {
    const repository = ImageRepository.safeParse(c.req.query("repository") ?? "");
    if (!repository.success)
      throw new PlatformError(
        400,
        "invalid_request",
        `repository: ${repository.error.issues[0]?.message ?? "expected host/path"}`,
        "repository",
      );
    const host = registryHostOf(repository.data);
    checkRegistryHost(host, settings.registries);
    // A registry at an address the platform may not reach is said so (the pull would be refused too);
    // a name that does not resolve is just "none".
    await resolveAllowed(
      new URL(`http://${host}`).hostname,
      registryAddresses(host, settings.registries),
      refusedRegistry(host),
    ).catch((e: unknown) => {
      if (e instanceof PlatformError) throw e;
    });
    const source = await resolver.sourceFor(c.get("caller").org, repository.data);
    return c.json({ repository: repository.data, host, source });
  });

  app.put("/:host", async (c) => {
    const caller = c.get("caller");
    admin(caller.role);
    const host = pathParam(c, "host", RegistryHost);
    checkRegistryHost(host, settings.registries, "host");
    const body = await parseBody(c, SetBody);
    const { info, replaced } = await credentials.set(caller.org, host, body.username, body.password, {
      id: caller.id,
      name: caller.name,
    });
    return c.json(info, replaced ? 200 : 201);
  });

  app.delete("/:host", async (c) => {
    const caller = c.get("caller");
    admin(caller.role);
    const host = pathParam(c, "host", RegistryHost);
    if (!(await credentials.remove(caller.org, host)))
      throw new PlatformError(
        404,
        "registry_credential_not_found",
        `the organization has no registry credential for ${host} (platform registry credentials list)`,
      );
    return c.json({ deleted: true });
  });

  return app;
}
