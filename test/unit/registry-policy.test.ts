/**
 * The registry policy (src/settings/registries.ts, src/container-images/registries.ts): which registries a
 * tenant may name, at which addresses the platform may reach one, and which repositories the
 * operator's pull credential serves each organization (src/registry-credentials/resolve.ts).
 */
import { describe, expect, it } from "vitest";
import { checkRegistryHost, registryAddresses } from "../../src/container-images/registries.ts";
import { operatorServes } from "../../src/registry-credentials/resolve.ts";
import { loadSettings } from "../../src/settings/index.ts";

describe("registry settings", () => {
  it("default: any host, public addresses only, the operator's credential for each organization's own namespace", () => {
    const { registries } = loadSettings({});
    expect(registries).toEqual({ hosts: [], allowedCidrs: [], operatorScopes: undefined });
    expect(() => checkRegistryHost("anything.example", registries)).not.toThrow();
    expect(registryAddresses("anything.example", registries)).toEqual({ allowPrivate: false, allowedCidrs: [] });
    expect(operatorServes("acme", "registry.example.com/acme/items", registries)).toBe(true);
    expect(operatorServes("beta", "registry.example.com/acme/items", registries)).toBe(false);
    expect(operatorServes("beta", "registry.example.com/beta", registries)).toBe(false);
  });

  it("reads the operator's hosts, addresses and scopes, and names a bad one", () => {
    const { registries } = loadSettings({
      PLATFORM_IMAGE_REGISTRIES: "Registry.Example.com, 127.0.0.1:5000",
      PLATFORM_IMAGE_REGISTRIES_ALLOWED_ADDRESSES: "10.0.0.0/8",
      PLATFORM_IMAGE_PULL_AUTH_SCOPE:
        "acme=registry.example.com/acme,registry.example.com/shared/; beta=registry.example.com/beta",
    });
    expect(registries.hosts).toEqual(["registry.example.com", "127.0.0.1:5000"]);
    expect(registries.allowedCidrs).toEqual(["10.0.0.0/8"]);
    expect(() => checkRegistryHost("127.0.0.1:6379", registries)).toThrow(
      "repository: images may come only from registry.example.com, 127.0.0.1:5000 on this platform, not 127.0.0.1:6379 (the operator's PLATFORM_IMAGE_REGISTRIES)",
    );
    // A listed host may be at any address (the operator named it), with the default port spelled or not.
    expect(registryAddresses("127.0.0.1:5000", registries).allowPrivate).toBe(true);
    expect(registryAddresses("registry.example.com:443", registries).allowPrivate).toBe(true);
    expect(registryAddresses("cdn.example.net:443", registries).allowPrivate).toBe(false);
    expect(operatorServes("acme", "registry.example.com/shared/base", registries)).toBe(true);
    expect(operatorServes("acme", "registry.example.com/acme/items", registries)).toBe(true);
    expect(operatorServes("acme", "registry.example.com/acme-other/items", registries)).toBe(false);
    expect(operatorServes("beta", "registry.example.com/shared/base", registries)).toBe(false);
    expect(operatorServes("gamma", "registry.example.com/gamma/items", registries)).toBe(false);
    expect(() =>
      loadSettings({
        PLATFORM_IMAGE_REGISTRIES: "https://registry.example.com",
        PLATFORM_IMAGE_REGISTRIES_ALLOWED_ADDRESSES: "somewhere",
        PLATFORM_IMAGE_PULL_AUTH_SCOPE: "acme:registry.example.com/acme",
      }),
    ).toThrow(
      /PLATFORM_IMAGE_REGISTRIES: expected comma-separated registry hosts.*PLATFORM_IMAGE_REGISTRIES_ALLOWED_ADDRESSES: expected comma-separated addresses or CIDRs.*PLATFORM_IMAGE_PULL_AUTH_SCOPE: expected <org>=<host\/path>/s,
    );
  });
});
