/**
 * `.platformrc.json`'s schema: the one definition of its keys, from which the JSON Schema shipped
 * with the CLI (schemas/platformrc.schema.json, for editors) is generated. The file holds what was
 * written, so no key has a zod default here: find.ts fills the defaults in, and the JSON
 * Schema shows them (`default`) to editors.
 */
import { z } from "zod";
import { OrgId } from "../contracts/orgs.ts";

import { BUILDERS } from "../container-images/build.ts";
import { LANGUAGES, type Language } from "../protos/languages.ts";

export const DEFAULT_PROTO_ROOT = "proto";
export const DEFAULT_LANGUAGE: Language = "node";

const REGISTRY_URL_ERROR = "expected the platform's http(s) base URL, e.g. https://platform.example.com";

// The repository form is the images noun's (src/container-images/names.ts): what publish records is what a workspace names.
export { IMAGE_REPOSITORY_ERROR, IMAGE_REPOSITORY_PATTERN } from "../container-images/names.ts";
import { IMAGE_REPOSITORY_ERROR, IMAGE_REPOSITORY_PATTERN } from "../container-images/names.ts";

/** A relative directory that stays inside the workspace: no "..", no leading "/". */
const PROTO_ROOT_PATTERN = /^(?!(?:[^/]*\/)*\.\.?(?:\/|$))[A-Za-z0-9_.-]+(?:\/[A-Za-z0-9_.-]+)*$/;

const BUILD_ARG_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** The keys commands use. */
export const WorkspaceConfig = z.object({
  registryUrl: z
    .string()
    .regex(/^https?:\/\/[^\s/?#]+[^\s?#]*$/, { message: REGISTRY_URL_ERROR, abort: true })
    .refine((text) => URL.canParse(text), REGISTRY_URL_ERROR)
    .describe(
      "The platform's base URL (its gateway): it holds the proto catalog, the service catalog and the dev center, and commands run in this workspace talk to it.",
    ),
  orgId: OrgId.describe("The organization the workspace's protos, services and images belong to."),
  imageRepository: z
    .string()
    .max(255)
    .regex(IMAGE_REPOSITORY_PATTERN, IMAGE_REPOSITORY_ERROR)
    .optional()
    .describe(
      "Where `platform publish` pushes the service's images, host[:port]/path. Default: <registry host>/<orgId>/<directory name>.",
    ),
  protoRoot: z
    .string()
    .regex(PROTO_ROOT_PATTERN, 'expected a directory inside the workspace, relative to it, e.g. "proto"')
    .optional()
    .meta({
      description: "The directory holding the .proto files, relative to the workspace root.",
      default: DEFAULT_PROTO_ROOT,
    }),
  language: z
    .enum(LANGUAGES)
    .optional()
    .meta({ description: "The language services and generated code are written in.", default: DEFAULT_LANGUAGE }),
  build: z
    .object({
      args: z
        .record(
          z
            .string()
            .regex(
              BUILD_ARG_PATTERN,
              "expected a build argument name: letters, digits and _, not starting with a digit",
            ),
          z.string(),
        )
        .optional()
        .describe("Build arguments passed to every image build (--build-arg NAME=value), e.g. NODE_IMAGE."),
      builder: z
        .enum(BUILDERS)
        .optional()
        .describe(`The image builder to use. Default: the first found of ${BUILDERS.join(", ")}.`),
    })
    .optional()
    .describe("How `platform publish` builds the service's image."),
});
export type WorkspaceConfig = z.infer<typeof WorkspaceConfig>;

/** The file: the keys, and first the `$schema` editors read (commands ignore it). */
export const PlatformrcFile = z
  .object({
    $schema: z.string().optional().describe("The JSON Schema of this file, so editors complete and check its keys."),
    ...WorkspaceConfig.shape,
  })
  .meta({
    title: ".platformrc.json",
    description:
      "A platform workspace: written by `platform init`, found by every command by walking up from the current directory.",
  });
export type PlatformrcFile = z.infer<typeof PlatformrcFile>;

/**
 * The JSON Schema editors read (draft-07, which every JSON language server supports). Unknown keys
 * are marked there, while the CLI ignores them (a newer CLI's key must not stop an older one) and
 * `platform doctor` warns about them (a typo).
 */
export function platformrcJsonSchema(): Record<string, unknown> {
  return z.toJSONSchema(PlatformrcFile, { target: "draft-07", io: "output" });
}

/** Keys of a parsed file that the schema does not know, as paths (`build.arg`), nested objects included. */
export function unknownKeys(json: unknown): string[] {
  return unknownIn(PlatformrcFile, json, "");
}

function unknownIn(schema: z.ZodObject, json: unknown, prefix: string): string[] {
  if (typeof json !== "object" || json === null || Array.isArray(json)) return [];
  return Object.entries(json).flatMap(([key, value]) => {
    const field = schema.shape[key];
    if (!field) return [`${prefix}${key}`];
    const inner = field instanceof z.ZodOptional ? field.unwrap() : field;
    return inner instanceof z.ZodObject ? unknownIn(inner, value, `${prefix}${key}.`) : [];
  });
}
