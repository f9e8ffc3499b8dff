/**
 * What the images noun accepts as names (docs/publish.md): image repositories with their registry
 * host, the service name (a repository's last component), tags and digests. Checked alike by
 * `.platformrc.json` (src/workspace/config.ts), `platform publish` and the gateway's image records.
 */
import { z } from "zod";

const DNS_NAME = "[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*";
const PATH_COMPONENT = "[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*";
/**
 * The distribution spec's repository name with an explicit registry host: docker reads a first
 * component without a "." or ":" (and not localhost) as a Docker Hub path, not as a host.
 */
export const IMAGE_REPOSITORY_PATTERN = new RegExp(
  `^(?=localhost[:/]|\\[|[^/]*[.:])(?:${DNS_NAME}|\\[[0-9a-fA-F:]+\\])(?::[0-9]{1,5})?(?:/${PATH_COMPONENT})+$`,
);
export const IMAGE_REPOSITORY_ERROR =
  "expected host/path: host[:port]/path, e.g. registry.example.com:5000/acme/items (a lowercase path, no tag or digest)";

/** A repository's last path component, as the distribution spec allows it: the service's name. */
export const ImageServiceName = z
  .string()
  .max(128)
  .regex(
    /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/,
    'expected a service name such as "items": lowercase letters and digits, separated by ".", "_" or "-"',
  );

/** The distribution spec's tag: `<version>-<short sha>[-dirty]` from `platform publish`. */
export const ImageTag = z
  .string()
  .regex(
    /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/,
    'expected an image tag such as "1.2.0-1a2b3c4": up to 128 letters, digits, "_", "." and "-", not starting with "." or "-"',
  );

export const ImageDigest = z
  .string()
  .regex(
    /^sha256:[0-9a-f]{64}$/,
    'expected a content digest "sha256:<64 hex digits>", as the registry answered the push',
  );

export const GitSha = z.string().regex(/^[0-9a-f]{7,40}$/, "expected a git commit id: 7 to 40 lowercase hex digits");

export const ImageRepository = z.string().max(255).regex(IMAGE_REPOSITORY_PATTERN, IMAGE_REPOSITORY_ERROR);
