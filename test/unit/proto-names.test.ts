/** The proto catalog's names (src/protos/names.ts): versions in semantic order, the default next version, safe paths. */
import { describe, expect, it } from "vitest";
import {
  compareVersions,
  nextSemver,
  ProtoFilePath,
  ProtoPackageName,
  ProtoVersionName,
} from "../../src/protos/names.ts";

describe("proto names", () => {
  it("orders versions by their numbers, not as text", () => {
    expect(compareVersions("1.10.0", "1.9.0")).toBeGreaterThan(0);
    expect(compareVersions("2.0.0", "10.0.0")).toBeLessThan(0);
    expect(["1.2.0", "1.10.0", "1.9.9", "1.10.0"].sort(compareVersions)).toEqual([
      "1.2.0",
      "1.9.9",
      "1.10.0",
      "1.10.0",
    ]);
  });

  it("publishes 1.0.0 first, then the next minor, or the next major for a breaking change", () => {
    expect(nextSemver(undefined, "minor")).toBe("1.0.0");
    expect(nextSemver(undefined, "major")).toBe("1.0.0");
    expect(nextSemver("1.4.2", "minor")).toBe("1.5.0");
    expect(nextSemver("1.4.2", "major")).toBe("2.0.0");
  });

  it("accepts only X.Y.Z versions, lowercase packages and relative .proto paths", () => {
    for (const v of ["1.0.0", "0.1.0", "10.20.30"]) expect(ProtoVersionName.safeParse(v).success, v).toBe(true);
    for (const v of ["1.0", "01.0.0", "1.0.0-rc.1", "v1.0.0", "latest"])
      expect(ProtoVersionName.safeParse(v).success, v).toBe(false);
    for (const p of ["platform.items.v1", "acme", "a_b.c1"])
      expect(ProtoPackageName.safeParse(p).success, p).toBe(true);
    for (const p of ["Platform.items", "platform..v1", ".x", "x.", "1x", "a/b"])
      expect(ProtoPackageName.safeParse(p).success, p).toBe(false);
    for (const p of ["platform/items/v1/items.proto", "a.proto", "a-b/c_d.e.proto"])
      expect(ProtoFilePath.safeParse(p).success, p).toBe(true);
    for (const p of [
      "../x.proto",
      "a/../../x.proto",
      "/etc/x.proto",
      "a//x.proto",
      "./x.proto",
      "a\\x.proto",
      "x.txt",
      "a/x.proto\n",
      "",
    ])
      expect(ProtoFilePath.safeParse(p).success, JSON.stringify(p)).toBe(false);
  });
});
