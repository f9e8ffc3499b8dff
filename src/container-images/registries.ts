/**
 * Which image registries a tenant may name, and at which addresses the platform may reach one
 * (docs/security.md, "Outbound calls a tenant names"). An image record, a deploy, a pull
 * credential and every request the platform itself makes to a registry (the token-server probe,
 * skopeo's pulls) go through `checkRegistryHost` and `registryAddresses`.
 *
 * - PLATFORM_IMAGE_REGISTRIES set: only those hosts (`host[:port]`), each at any address (the
 *   operator named it, as it names its S3 endpoint); another host is a 403 `registry_not_allowed`.
 * - Unset: any host, but only at a public address or one in PLATFORM_IMAGE_REGISTRIES_ALLOWED_ADDRESSES
 *   (`platform up` allows this machine's loopback by default).
 */
import { PlatformError } from "../contracts/errors.ts";
import type { AddressPolicy, Refuse } from "../outbound/guard.ts";
import type { RegistryPolicy } from "../settings/registries.ts";

/** The registry host of a repository (`host[:port]/path`), lowercased. */
export const registryHostOf = (repository: string) => (repository.split("/")[0] as string).toLowerCase();

/** Throws the 403 that names the setting, unless the operator lets tenants name `host`. */
export function checkRegistryHost(host: string, policy: RegistryPolicy, field = "repository"): void {
  const lower = host.toLowerCase();
  if (policy.hosts.length === 0 || policy.hosts.includes(lower)) return;
  throw new PlatformError(
    403,
    "registry_not_allowed",
    `${field}: images may come only from ${policy.hosts.join(", ")} on this platform, not ${lower} (the operator's PLATFORM_IMAGE_REGISTRIES)`,
    field,
  );
}

/**
 * The addresses the platform may connect to for `host` (`host[:port]`, as named or as a CONNECT
 * names it): any for a host the operator lists, else public ones and the allowed ranges. A
 * redirect's target is judged as its own host, never as the registry that sent it there.
 */
export function registryAddresses(host: string, policy: RegistryPolicy): AddressPolicy {
  const lower = host.toLowerCase();
  const listed = policy.hosts.includes(lower) || policy.hosts.includes(lower.replace(/:(443|80)$/, ""));
  return { allowPrivate: listed, allowedCidrs: policy.allowedCidrs };
}

/** How a registry at a refused address reads: the host as named and the kind of address, never the address. */
export function refusedRegistry(host: string): Refuse {
  return (kind) =>
    new PlatformError(
      403,
      "registry_forbidden",
      `${host} is at a ${kind} address, which image registries may not be at; the operator can allow it with PLATFORM_IMAGE_REGISTRIES=${host} or PLATFORM_IMAGE_REGISTRIES_ALLOWED_ADDRESSES=<address or cidr,...>`,
      "repository",
    );
}
