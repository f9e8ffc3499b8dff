/**
 * The proto catalog's store against a real Redis and a file artifact store (src/protos/store.ts):
 * versions are immutable (409), the package's latest is the highest version whatever the order of
 * publishing, what a publish sends must be a self-contained image of the package with exactly its
 * sources, the settings' bounds hold and leave nothing behind, and organizations never meet.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import { FieldDescriptorProto_Label, FieldDescriptorProto_Type, FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PlatformError } from "../../src/contracts/errors.ts";
import {
  describeVersion,
  getVersion,
  listPackages,
  listVersions,
  type ProtoCatalog,
  publishVersion,
} from "../../src/protos/store.ts";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { FileStore } from "../../src/storage/index.ts";
import { type PrivateRedis, privateRedis } from "../helpers/redis.ts";

const PKG = "platform.items.v1";
const FILE = "platform/items/v1/items.proto";
const WHO = { id: "key_1", name: "dev" };

/** A FileDescriptorSet as a compiler would write it: one message, one service; `imports` left unresolved. */
function image(pkg = PKG, name = FILE, imports: string[] = []): Uint8Array {
  return toBinary(
    FileDescriptorSetSchema,
    create(FileDescriptorSetSchema, {
      file: [
        {
          name,
          package: pkg,
          syntax: "proto3",
          dependency: imports,
          messageType: [
            {
              name: "Item",
              field: [
                {
                  name: "id",
                  number: 1,
                  jsonName: "id",
                  type: FieldDescriptorProto_Type.STRING,
                  label: FieldDescriptorProto_Label.OPTIONAL,
                },
              ],
            },
          ],
          service: [
            {
              name: "ItemService",
              method: [{ name: "GetItem", inputType: `.${pkg}.Item`, outputType: `.${pkg}.Item` }],
            },
          ],
        },
      ],
    }),
  );
}

let redis: PrivateRedis;
let ctl: Control;
let dir: string;
let reg: ProtoCatalog;

const publish = (version: string, overrides: Partial<Parameters<typeof publishVersion>[3]> = {}, org = "acme") =>
  publishVersion(reg, org, WHO, {
    package: PKG,
    version,
    image: image(),
    files: [{ path: FILE, content: `// ${version}\n` }],
    allowBreaking: false,
    ...overrides,
  });

async function refusal(p: Promise<unknown>): Promise<[number, string, string]> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(PlatformError);
  const err = e as PlatformError;
  return [err.status, err.code, err.message];
}

/** The status and code of a refusal. */
const codes = async (p: Promise<unknown>) => (await refusal(p)).slice(0, 2);

beforeAll(async () => {
  redis = await privateRedis();
  ctl = connectControl(redis.url, "protos");
  dir = await mkdtemp(join(tmpdir(), "platform-proto-store-"));
  reg = { ctl, artifacts: new FileStore(dir), limits: { maxPackages: 2, maxVersions: 3 } };
});

afterAll(async () => {
  await ctl?.redis.quit();
  await redis?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("the proto store", () => {
  it("keeps versions immutable and the highest as latest, whatever the order of publishing", async () => {
    const first = await publish("2.0.0");
    expect(first).toMatchObject({ package: PKG, version: "2.0.0", org: "acme", service_names: [`${PKG}.ItemService`] });
    await publish("1.5.0");
    expect(await codes(publish("2.0.0"))).toEqual([409, "proto_version_exists"]);
    expect(await listPackages(reg, "acme")).toEqual([
      expect.objectContaining({ package: PKG, latest: "2.0.0", versions: 2 }),
    ]);
    expect((await listVersions(reg, "acme", PKG)).map((v) => v.version)).toEqual(["2.0.0", "1.5.0"]);
    expect((await getVersion(reg, "acme", PKG, "latest")).version).toBe("2.0.0");
    const summary = await describeVersion(reg, await getVersion(reg, "acme", PKG, "1.5.0"));
    expect(summary.services[0]?.rpcs[0]).toMatchObject({ name: "GetItem", input: `${PKG}.Item` });
    expect(summary.messages.map((m) => m.name)).toEqual(["Item"]);
  });

  it("refuses an image that is not self-contained or whose files are not the sources sent", async () => {
    const [status, code, message] = await refusal(
      publish("3.0.0", { image: image(PKG, FILE, ["platform/common/v1/money.proto"]) }),
    );
    expect([status, code]).toEqual([400, "invalid_image"]);
    expect(message).toContain("not a self-contained FileDescriptorSet");
    expect(await codes(publish("3.0.0", { image: new Uint8Array([0xff, 0xff]) }))).toEqual([400, "invalid_image"]);
    const elsewhere = [{ path: "platform/items/v1/other.proto", content: "" }];
    expect(await codes(publish("3.0.0", { files: elsewhere }))).toEqual([400, "sources_mismatch"]);
    expect(await codes(publish("3.0.0", { image: image("platform.other.v1") }))).toEqual([400, "invalid_image"]);
  });

  it("holds the settings' bounds, leaving no object behind", async () => {
    await publish("2.1.0");
    const [status, code, message] = await refusal(publish("2.2.0"));
    expect([status, code]).toEqual([409, "proto_limit_reached"]);
    expect(message).toContain("PLATFORM_MAX_PROTO_VERSIONS");
    const left: string[] = [];
    for await (const o of reg.artifacts.list(`protos/acme/${PKG}/`)) left.push(o.key.split("/")[3] as string);
    expect([...new Set(left)].sort()).toEqual(["1.5.0", "2.0.0", "2.1.0"]);
    const other = (name: string) =>
      publishVersion(reg, "acme", WHO, {
        package: name,
        version: "1.0.0",
        image: image(name, `${name.replaceAll(".", "/")}/x.proto`),
        files: [{ path: `${name.replaceAll(".", "/")}/x.proto`, content: "" }],
        allowBreaking: false,
      });
    await other("platform.second.v1");
    expect(await codes(other("platform.third.v1"))).toEqual([409, "proto_limit_reached"]);
  });

  it("keeps organizations apart: the same package elsewhere is another package", async () => {
    expect(await codes(getVersion(reg, "rival", PKG, "2.0.0"))).toEqual([404, "proto_package_not_found"]);
    expect(await listPackages(reg, "rival")).toEqual([]);
    await publish("2.0.0", {}, "rival");
    expect((await listVersions(reg, "rival", PKG)).map((v) => v.org)).toEqual(["rival"]);
    expect((await listVersions(reg, "acme", PKG)).map((v) => v.version)).toEqual(["2.1.0", "2.0.0", "1.5.0"]);
  });
});
