/**
 * What the proto catalog accepts as names: proto packages, versions (semantic, X.Y.Z) and source
 * paths. Checked alike by the gateway (path parameters, the publish body) and by the CLI (what it
 * sends, and what it writes on `proto fetch`), so no name can turn into a path outside its folder.
 */
import { z } from "zod";

/**
 * Lowercase only, unlike protoc: packages become object keys and directory names, and two that
 * differ only in case would collide on a case-insensitive filesystem. buf's STANDARD rules ask
 * for lower_snake_case packages anyway (PACKAGE_LOWER_SNAKE_CASE).
 */
export const ProtoPackageName = z
  .string()
  .max(200)
  .regex(
    /^[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*$/,
    'expected a lowercase proto package such as "platform.items.v1" (dot-separated lower_snake_case words)',
  );

const MAX_PART = 999_999_999;
/** X.Y.Z without pre-release or build parts: versions sort by their three numbers alone. */
const SEMVER = /^(0|[1-9]\d{0,8})\.(0|[1-9]\d{0,8})\.(0|[1-9]\d{0,8})$/;

export const ProtoVersionName = z
  .string()
  .regex(SEMVER, 'expected a semantic version X.Y.Z such as "1.2.0" (numbers without leading zeros)');

type Semver = [number, number, number];

function parseSemver(version: string): Semver {
  const m = SEMVER.exec(version);
  if (!m) throw new Error(`not a version: ${version}`);
  return [Number(m[1]), Number(m[2]), Number(m[3])];
}

export function compareVersions(a: string, b: string): number {
  const [x, y] = [parseSemver(a), parseSemver(b)];
  return x[0] - y[0] || x[1] - y[1] || x[2] - y[2];
}

/**
 * The version a publish gets when none is named: 1.0.0 first (the package is already `v1` in its
 * name, so its first release is a stable 1.0.0), then the next minor, or the next major for a
 * change that breaks the previous version.
 */
export function nextSemver(latest: string | undefined, bump: "minor" | "major"): string {
  if (latest === undefined) return "1.0.0";
  const [major, minor] = parseSemver(latest);
  if (bump === "major") return `${Math.min(major + 1, MAX_PART)}.0.0`;
  return `${major}.${Math.min(minor + 1, MAX_PART)}.0`;
}

/**
 * A source file's path inside its module (`platform/items/v1/items.proto`), as buf and protoc
 * name it: "/"-separated segments of letters, digits, "_", "-" and ".", none of them "." or "..",
 * ending in `.proto`. Nothing else can be stored, so nothing else can be written back.
 */
export const ProtoFilePath = z
  .string()
  .max(512)
  .refine(
    (path) =>
      path.endsWith(".proto") &&
      path.split("/").every((segment) => /^[A-Za-z0-9_.-]+$/.test(segment) && segment !== "." && segment !== ".."),
    'expected a relative path such as "platform/items/v1/items.proto": "/"-separated names of letters, digits, "_", "-" and ".", ending in .proto',
  );
