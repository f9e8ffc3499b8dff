/**
 * The proto catalog section (docs/protos.md): how large one publish may be (its request body:
 * the image and the sources) and how many packages an organization and versions a package may
 * hold, so what one organization publishes cannot grow Redis or the artifact store without bound.
 */
import { z } from "zod";

const count = (fallback: number) =>
  z.coerce.number({ message: "expected a whole number" }).int().min(1, "expected at least 1").default(fallback);

export const protosShape = {
  PLATFORM_MAX_PROTO_BYTES: z.coerce
    .number({ message: "expected a whole number of bytes" })
    .int()
    .positive()
    .default(4 * 1024 * 1024),
  PLATFORM_MAX_PROTO_PACKAGES: count(500),
  PLATFORM_MAX_PROTO_VERSIONS: count(1000),
};

export type ProtoSettings = { maxBytes: number; maxPackages: number; maxVersions: number };

export function protoSettings(e: z.infer<z.ZodObject<typeof protosShape>>): ProtoSettings {
  return {
    maxBytes: e.PLATFORM_MAX_PROTO_BYTES,
    maxPackages: e.PLATFORM_MAX_PROTO_PACKAGES,
    maxVersions: e.PLATFORM_MAX_PROTO_VERSIONS,
  };
}
