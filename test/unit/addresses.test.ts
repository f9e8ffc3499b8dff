/** The address classifier behind model-source fetching: every non-public range, in every spelling. */
import { describe, expect, it } from "vitest";
import { nonPublicKind, refusedKind } from "../../src/outbound/addresses.ts";
import { checkSourceScheme, huggingFaceUrl } from "../../src/models/sources.ts";
import { loadSettings } from "../../src/settings/index.ts";
import { parseCidr } from "../../src/settings/sources.ts";

const kind = nonPublicKind;
const strict = { allowPrivate: false, allowedCidrs: [] };

describe("address classifier", () => {
  it.each([
    ["127.0.0.1", "loopback"],
    ["127.255.0.9", "loopback"],
    ["10.1.2.3", "private"],
    ["172.16.0.1", "private"],
    ["172.31.255.255", "private"],
    ["192.168.1.1", "private"],
    ["169.254.169.254", "link-local"],
    ["100.64.0.1", "carrier-grade NAT"],
    ["100.127.255.254", "carrier-grade NAT"],
    ["0.0.0.0", "unspecified"],
    ["224.0.0.1", "multicast"],
    ["255.255.255.255", "reserved"],
    ["::", "unspecified"],
    ["::1", "loopback"],
    ["[::1]", "loopback"],
    ["fe80::1", "link-local"],
    ["fe80::1%eth0", "link-local"],
    ["fd00:ec2::254", "unique-local"],
    ["fc12:3456::1", "unique-local"],
    ["ff02::1", "multicast"],
    // IPv6 spellings that reach an IPv4 address.
    ["::ffff:127.0.0.1", "loopback"],
    ["::ffff:7f00:1", "loopback"],
    ["::ffff:169.254.169.254", "link-local"],
    ["::ffff:a9fe:a9fe", "link-local"],
    ["::ffff:10.0.0.1", "private"],
    ["::127.0.0.1", "loopback"],
    ["64:ff9b::a9fe:a9fe", "link-local"],
    ["2002:c0a8:0101::1", "private"],
  ])("%s is %s", (address, expected) => {
    expect(kind(address)).toBe(expected);
  });

  it.each([
    "8.8.8.8",
    "1.1.1.1",
    "172.32.0.1",
    "100.128.0.1",
    "169.255.0.1",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "2a00:1450::1",
  ])("%s is public", (address) => {
    expect(kind(address)).toBeUndefined();
  });

  it("parses addresses and CIDRs, and rejects what is neither", () => {
    expect(refusedKind("example.com", strict)).toBe("unparseable");
    expect(refusedKind("1.2.3", strict)).toBe("unparseable");
    // A dotted tail is the address's last 32 bits.
    expect(
      refusedKind("fd00:2:3:4:5:6:1.2.3.4", { allowPrivate: false, allowedCidrs: ["fd00:2:3:4:5:6:102:304/128"] }),
    ).toBeUndefined();
    expect(parseCidr("10.0.0.0/8")).toBe("10.0.0.0/8");
    expect(parseCidr("fd00::/8")).toBe("fd00::/8");
    expect(parseCidr("10.0.0.1")).toBe("10.0.0.1/32");
    expect(parseCidr("[fd00::1]")).toBe("fd00::1/128");
    for (const bad of ["10.0.0.0/33", "10.0.0.0/x", "fd00::/129", "host.internal", ""])
      expect(parseCidr(bad)).toBeUndefined();
  });

  it("refuses non-public addresses unless allowed, by flag or by CIDR (mapped forms included)", () => {
    expect(refusedKind("127.0.0.1", strict)).toBe("loopback");
    expect(refusedKind("8.8.8.8", strict)).toBeUndefined();
    expect(refusedKind("127.0.0.1", { allowPrivate: true, allowedCidrs: [] })).toBeUndefined();
    const listed = { allowPrivate: false, allowedCidrs: ["10.20.0.0/16"] };
    expect(refusedKind("10.20.3.4", listed)).toBeUndefined();
    expect(refusedKind("::ffff:10.20.3.4", listed)).toBeUndefined();
    expect(refusedKind("64:ff9b::10.20.3.4", listed)).toBeUndefined();
    expect(refusedKind("2002:a14:304::1", listed)).toBeUndefined();
    // `::1` is loopback, not the IPv4-compatible form of 0.0.0.1 that an IPv4 range would allow.
    expect(refusedKind("::1", { allowPrivate: false, allowedCidrs: ["0.0.0.0/0"] })).toBe("loopback");
    // An IPv6 range allows IPv6 addresses only, though ::/0 spans the IPv4-mapped ones.
    expect(refusedKind("169.254.169.254", { allowPrivate: false, allowedCidrs: ["::/0"] })).toBe("link-local");
    expect(refusedKind("10.21.0.1", listed)).toBe("private");
    expect(refusedKind("169.254.169.254", listed)).toBe("link-local");
  });
});

describe("source settings and schemes", () => {
  it("reads the PLATFORM_SOURCES_* settings, with safe defaults", () => {
    const d = loadSettings({}).sources;
    expect(d).toMatchObject({ allowHttp: false, allowPrivate: false, allowedCidrs: [], maxBytes: 64 * 1024 ** 3 });
    const s = loadSettings({
      PLATFORM_SOURCES_ALLOW_HTTP: "true",
      PLATFORM_SOURCES_ALLOW_PRIVATE: "false",
      PLATFORM_SOURCES_ALLOWED_HOSTS: "10.0.0.0/8, fd00::/8",
      PLATFORM_MAX_MODEL_BYTES: "1000",
      PLATFORM_SOURCES_IDLE_TIMEOUT_MS: "500",
    }).sources;
    expect(s).toMatchObject({ allowHttp: true, allowPrivate: false, maxBytes: 1000, idleTimeoutMs: 500 });
    expect(s.allowedCidrs).toEqual(["10.0.0.0/8", "fd00::/8"]);
    expect(() => loadSettings({ PLATFORM_SOURCES_ALLOWED_HOSTS: "10.0.0.0/8,internal.example" })).toThrow(
      /PLATFORM_SOURCES_ALLOWED_HOSTS.*internal\.example/,
    );
    expect(() => loadSettings({ PLATFORM_SOURCES_ALLOW_HTTP: "yes" })).toThrow(/PLATFORM_SOURCES_ALLOW_HTTP/);
  });

  it("HF_ENDPOINT: huggingface.co by default, a mirror's base URL otherwise; hf:// names stay under resolve/", () => {
    expect(loadSettings({}).sources.hfEndpoint).toBe("https://huggingface.co");
    const mirror = loadSettings({ HF_ENDPOINT: "https://hf-mirror.example/hub/" }).sources.hfEndpoint;
    expect(mirror).toBe("https://hf-mirror.example/hub");
    expect(huggingFaceUrl("hf://org/repo@v1.2/sub/model.gguf", mirror)).toBe(
      "https://hf-mirror.example/hub/org/repo/resolve/v1.2/sub/model.gguf",
    );
    expect(huggingFaceUrl("hf://org/repo/a b?.gguf", mirror)).toBe(
      "https://hf-mirror.example/hub/org/repo/resolve/main/a%20b%3F.gguf",
    );
    for (const bad of [
      "hf://org/repo/../../other/x.gguf",
      "hf://org/repo@../x.gguf",
      "hf://org/repo//x.gguf",
      "hf://org/repo/./x.gguf",
    ]) {
      expect(() => huggingFaceUrl(bad, mirror), bad).toThrow(/expected hf:\/\/<org>\/<repo>\[@<revision>\]\/<file>/);
    }
    for (const bad of [
      "huggingface.co",
      "ftp://hf.example",
      "https://user:pass@hf.example",
      "https://hf.example/?x=1",
    ]) {
      expect(() => loadSettings({ HF_ENDPOINT: bad }), bad).toThrow(/HF_ENDPOINT: expected the http\(s\) base URL/);
    }
  });

  it("refuses schemes nobody handles, naming the ones accepted", () => {
    for (const source of ["ftp://example.com/m.gguf", "gopher://x/", "data:text/plain,hi", "javascript:alert(1)"]) {
      expect(() => checkSourceScheme(source)).toThrow(/scheme is not supported; use https:\/\//);
    }
    for (const source of [
      "https://x/m.gguf",
      "hf://o/r/f.gguf",
      "s3://b/k",
      "file:///tmp/m.gguf",
      "/tmp/m.gguf",
      "models/m.gguf",
    ]) {
      expect(() => checkSourceScheme(source)).not.toThrow();
    }
  });
});
