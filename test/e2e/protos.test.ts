/**
 * The proto catalog through the shared `platform up`, as a team uses it (docs/protos.md): a user
 * key of organization `acme-…` (a name of this file's own) publishes the example ItemService from
 * its workspace (1.0.0), a compatible change (1.1.0), a deletion that only the FILE rules call breaking (refused under FILE, then a
 * minor under WIRE_JSON), a breaking rename (refused with buf's findings, then 2.0.0 with
 * --allow-breaking); `proto versions` lists them, `proto fetch` writes them back, the API lists each
 * version's services and messages. Another organization's admin and user keys, and the operator,
 * see none of it: 404 on every route, nothing in lists, and what they publish lands in their own
 * organization. The dashboard, in headless Chromium, shows the operator's own organization's
 * package, its versions, services and messages (skipped, saying so, without /usr/bin/chromium).
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type Browser, chromium } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeDescriptorSet } from "../../src/protos/descriptors.ts";
import { BUF_YAML, ITEMS_PATH, ITEMS_PROTO, makeWorkspace } from "../helpers/protos.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import { type CliResult, runCli, type Stack } from "../helpers/stack.ts";

const CHROMIUM = "/usr/bin/chromium";
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium)
  console.warn(`protos dashboard test skipped: ${CHROMIUM} not found (apt-get install chromium; .ci/run installs it)`);

type Key = { id: string; key: string };
type Version = {
  package: string;
  version: string;
  org: string;
  allow_breaking: boolean;
  image: { sha256: string };
  files: { path: string; sha256: string }[];
  service_names: string[];
};
const PKG = "platform.items.v1";
const VERSIONS = `/admin/v1/protos/${PKG}/versions`;
const ACME = unique("acme");
const RIVAL = unique("rival");

let stack: Stack;
let work: string;
let asAcme: NodeJS.ProcessEnv;
const keys = {} as Record<"acmeUser" | "rivalAdmin" | "rivalUser", Key>;
const dirs: string[] = [];

async function call(key: string, method: string, path: string, body?: unknown) {
  const res = await fetch(`${stack.baseUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const bytes = Buffer.from(await res.arrayBuffer());
  const json = res.headers.get("content-type")?.startsWith("application/json") ? JSON.parse(bytes.toString()) : {};
  return { status: res.status, body: json as Record<string, unknown> & { data?: unknown[] }, bytes };
}

const codeOf = (r: { body: Record<string, unknown> }) => (r.body.error as { code?: string } | undefined)?.code;
const cli = (args: string[], env = asAcme, cwd = work): Promise<CliResult> => runCli(args, env, cwd);
const editItems = (change: (text: string) => string) =>
  readFile(join(work, ITEMS_PATH), "utf8").then((text) => writeFile(join(work, ITEMS_PATH), change(text)));
const setBreakingRules = (rules: string) => writeFile(join(work, "buf.yaml"), BUF_YAML.replace("WIRE_JSON", rules));

beforeAll(async () => {
  stack = await sharedStack();
  for (const id of [ACME, RIVAL]) expect((await stack.admin("POST", "/admin/v1/orgs", { id })).status).toBe(201);
  const key = async (name: string, org: string, role: string) => {
    const r = await stack.admin<Key>("POST", "/admin/v1/keys", { name, org, role });
    expect(r.status).toBe(201);
    return r.body;
  };
  keys.acmeUser = await key(`${ACME}-dev`, ACME, "user");
  keys.rivalAdmin = await key(`${RIVAL}-admin`, RIVAL, "admin");
  keys.rivalUser = await key(`${RIVAL}-dev`, RIVAL, "user");
  work = await makeWorkspace({ registryUrl: stack.baseUrl, orgId: ACME });
  dirs.push(work);
  asAcme = { ...stack.env, PLATFORM_API_KEY: keys.acmeUser.key };
});

afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

describe("proto publish, versions and fetch", () => {
  it("publishes the first version as 1.0.0 with any key of the organization; an unchanged workspace publishes nothing", async () => {
    const first = await cli(["proto", "publish"]);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toBe(`published ${PKG}@1.0.0 (first version) to ${stack.baseUrl}\n`);
    const again = await cli(["proto", "publish"]);
    expect(again.stdout).toBe(`${PKG}@1.0.0: unchanged, nothing published\n`);
    const taken = await cli(["proto", "publish", "--version", "1.0.0"]);
    expect(taken.code).toBe(1);
    expect(taken.stderr).toContain(`${PKG}@1.0.0 is already published and versions never change`);
    expect((await cli(["proto", "publish", "--version", "1.0"])).code).toBe(2);
  });

  it("publishes a compatible change as the next minor; the breaking rules are buf.yaml's (FILE or WIRE_JSON)", async () => {
    await editItems((t) => `${t}\nmessage Note {\n  string text = 1;\n}\n`);
    expect((await cli(["proto", "publish"])).stdout).toBe(`published ${PKG}@1.1.0 (after 1.0.0) to ${stack.baseUrl}\n`);
    // Deleting a message breaks generated code (FILE) but not the wire or JSON (WIRE_JSON).
    await editItems((t) => t.replace("\nmessage Note {\n  string text = 1;\n}\n", ""));
    await setBreakingRules("FILE");
    const refused = await cli(["proto", "publish"]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(
      `${PKG}: 1 breaking change against 1.1.0 (buf breaking, rules FILE from buf.yaml's breaking.use):\n${ITEMS_PATH}:1:1: MESSAGE_NO_DELETE: Previously present message "Note" was deleted from file.`,
    );
    await setBreakingRules("WIRE_JSON");
    expect((await cli(["proto", "publish"])).stdout).toBe(`published ${PKG}@1.2.0 (after 1.1.0) to ${stack.baseUrl}\n`);
  });

  it("refuses a breaking change with buf's findings, then publishes it as the next major with --allow-breaking", async () => {
    await editItems((t) => t.replace("string description = 3;", "string details = 3;"));
    const refused = await cli(["proto", "publish"]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(
      `${PKG}: 2 breaking changes against 1.2.0 (buf breaking, rules WIRE_JSON from buf.yaml's breaking.use):`,
    );
    expect(refused.stderr).toContain(
      `${ITEMS_PATH}:19:10: FIELD_SAME_NAME: Field "3" on message "Item" changed name from "description" to "details".`,
    );
    expect(refused.stderr).toContain(`publish ${PKG}@2.0.0 with --allow-breaking`);
    const allowed = await cli(["proto", "publish", "--allow-breaking"]);
    expect(allowed.code, allowed.stderr).toBe(0);
    expect(allowed.stdout).toBe(
      `published ${PKG}@2.0.0 (after 1.2.0; 2 breaking changes allowed) to ${stack.baseUrl}\n`,
    );

    const listed = JSON.parse((await cli(["proto", "versions", PKG, "--json"])).stdout) as Version[];
    expect(listed.map((v) => [v.version, v.allow_breaking, v.org])).toEqual([
      ["2.0.0", true, ACME],
      ["1.2.0", false, ACME],
      ["1.1.0", false, ACME],
      ["1.0.0", false, ACME],
    ]);
    const table = await cli(["proto", "versions", PKG]);
    expect(table.stdout).toMatch(
      new RegExp(`│ 2\\.0\\.0 .*│ ${ACME}-dev .*│ platform\\.items\\.v1\\.ItemService │ allowed`),
    );
    const packages = JSON.parse((await cli(["proto", "list", "--json"])).stdout) as { package: string }[];
    expect(packages).toEqual([expect.objectContaining({ package: PKG, latest: "2.0.0", versions: 4 })]);
  });

  it("fetches a version's sources and image into --out, and the latest without a version", async () => {
    const out = await mkdtemp(join(tmpdir(), "platform-fetched-"));
    dirs.push(out);
    const r = await cli(["proto", "fetch", `${PKG}@1.0.0`, "--out", out]);
    expect(r.code, r.stderr).toBe(0);
    expect(await readFile(join(out, "platform/items/v1/items.proto"), "utf8")).toBe(ITEMS_PROTO);
    const image = decodeDescriptorSet(await readFile(join(out, `${PKG}-1.0.0.binpb`)));
    const file = image.file.find((f) => f.name === "platform/items/v1/items.proto");
    expect(file?.service[0]?.name).toBe("ItemService");
    expect(file?.sourceCodeInfo?.location.length).toBeGreaterThan(10);
    expect((await cli(["proto", "fetch", PKG, "--out", out])).code).toBe(0);
    expect(await readFile(join(out, "platform/items/v1/items.proto"), "utf8")).toContain("string details = 3;");
    expect(existsSync(join(out, `${PKG}-2.0.0.binpb`))).toBe(true);
  });

  it("lists a version's services, RPCs and messages from its image, and serves the image as recorded", async () => {
    const r = await call(keys.acmeUser.key, "GET", `${VERSIONS}/1.0.0`);
    expect(r.status).toBe(200);
    const services = r.body.services as { full_name: string; comment: string; rpcs: Record<string, unknown>[] }[];
    expect(services).toHaveLength(1);
    expect(services[0]).toMatchObject({
      full_name: "platform.items.v1.ItemService",
      comment: "ItemService stores items and reads them back.",
    });
    expect(services[0]?.rpcs.map((m) => [m.name, m.input, m.output, m.server_streaming])).toEqual([
      ["GetItem", `${PKG}.GetItemRequest`, `${PKG}.GetItemResponse`, false],
      ["ListItems", `${PKG}.ListItemsRequest`, `${PKG}.ListItemsResponse`, false],
      ["CreateItem", `${PKG}.CreateItemRequest`, `${PKG}.CreateItemResponse`, false],
    ]);
    const messages = r.body.messages as { name: string; fields: { name: string; type: string }[] }[];
    expect(messages.map((m) => m.name)).toContain("Item");
    expect(messages.find((m) => m.name === "Item")?.fields.map((f) => `${f.type} ${f.name}`)).toEqual([
      "string id",
      "string name",
      "string description",
    ]);
    expect(messages.find((m) => m.name === "ListItemsResponse")?.fields[0]?.type).toBe(`repeated ${PKG}.Item`);
    const image = await call(keys.acmeUser.key, "GET", `${VERSIONS}/1.0.0/image`);
    expect(createHash("sha256").update(image.bytes).digest("hex")).toBe((r.body.image as { sha256: string }).sha256);
    const source = await call(keys.acmeUser.key, "GET", `${VERSIONS}/latest/files/platform/items/v1/items.proto`);
    expect(source.bytes.toString()).toContain("string details = 3;");
  });
});

describe("another organization", () => {
  const routes = [
    VERSIONS,
    `${VERSIONS}/1.0.0`,
    `${VERSIONS}/latest`,
    `${VERSIONS}/1.0.0/image`,
    `${VERSIONS}/1.0.0/files/platform/items/v1/items.proto`,
  ];

  it("sees none of it: 404 on every route and nothing in lists, for its admin, its users and the operator", async () => {
    for (const [who, key] of [
      ["rival admin", keys.rivalAdmin.key],
      ["rival user", keys.rivalUser.key],
      ["operator", stack.apiKey],
    ] as const) {
      // The operator's organization is every file's on the shared stack: of its list, only this package counts.
      const listed = (await call(key, "GET", "/admin/v1/protos")).body.data as { package: string }[];
      expect(key === stack.apiKey ? listed.filter((p) => p.package === PKG) : listed, who).toEqual([]);
      for (const path of routes) {
        const r = await call(key, "GET", path);
        expect([r.status, codeOf(r)], `${who}: GET ${path}`).toEqual([404, "proto_package_not_found"]);
      }
    }
    const asRival = { ...stack.env, PLATFORM_API_KEY: keys.rivalUser.key };
    const elsewhere = await mkdtemp(join(tmpdir(), "platform-rival-"));
    dirs.push(elsewhere);
    expect(JSON.parse((await cli(["proto", "list", "--json"], asRival, elsewhere)).stdout)).toEqual([]);
    const versions = await cli(["proto", "versions", PKG], asRival, elsewhere);
    expect(versions.code).toBe(1);
    expect(versions.stderr).toContain(`no proto package "${PKG}" in your organization`);
    expect((await cli(["proto", "fetch", `${PKG}@1.0.0`, "--out", elsewhere], asRival, elsewhere)).code).toBe(1);
  });

  it("cannot publish over it: the CLI refuses another organization's workspace, and what it publishes stays its own", async () => {
    for (const key of [keys.rivalAdmin.key, keys.rivalUser.key]) {
      const r = await cli(["proto", "publish", "--version", "9.0.0"], { ...stack.env, PLATFORM_API_KEY: key });
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(
        `.platformrc.json names organization "${ACME}", but your credentials for ${stack.baseUrl} are for "${RIVAL}"`,
      );
    }
    const before = await call(keys.acmeUser.key, "GET", `${VERSIONS}/1.0.0`);
    // The same package and version, straight through the API: it lands in rival's own registry.
    const image = (await call(keys.acmeUser.key, "GET", `${VERSIONS}/1.0.0/image`)).bytes.toString("base64");
    const body = { version: "1.0.0", image, files: [{ path: "platform/items/v1/items.proto", content: "rival's" }] };
    const naming = await call(keys.rivalAdmin.key, "POST", VERSIONS, { ...body, org: ACME });
    expect([naming.status, codeOf(naming)]).toEqual([400, "invalid_request"]);
    const own = await call(keys.rivalAdmin.key, "POST", VERSIONS, body);
    expect([own.status, own.body.org]).toEqual([201, RIVAL]);
    expect((await call(keys.rivalUser.key, "GET", VERSIONS)).body.data).toHaveLength(1);
    expect(await call(keys.acmeUser.key, "GET", `${VERSIONS}/1.0.0`)).toEqual(before);
    expect((await call(keys.acmeUser.key, "GET", VERSIONS)).body.data).toHaveLength(4);
  });
});

describe.skipIf(!haveChromium)("the dashboard", () => {
  let browser: Browser;
  beforeAll(async () => {
    if (!existsSync(`${ROOT}dist/dashboard/app.js`))
      execFileSync(process.execPath, [`${ROOT}scripts/build-dashboard.mjs`], { stdio: "inherit" });
    // The operator's own organization's workspace: the dashboard signs in with an operator's key.
    const own = await makeWorkspace({ registryUrl: stack.baseUrl, orgId: "default" });
    dirs.push(own);
    const r = await cli(["proto", "publish"], { ...stack.env, PLATFORM_API_KEY: stack.apiKey }, own);
    expect(r.code, r.stderr).toBe(0);
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run"],
    });
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
  });

  it("shows the organization's packages, a package's versions and a version's services and messages", async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 1400 } });
    await page.goto(`${stack.baseUrl}/dashboard`);
    await page.locator("input[name=key]").fill(stack.apiKey);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByTestId(`proto-package-${PKG}`).click();
    // The operator's organization has its own platform.items.v1 with one version, not acme's four.
    const rows = page.getByTestId("proto-versions").locator("tbody tr");
    await expect.poll(() => rows.count()).toBe(1);
    expect(await rows.first().textContent()).toContain("1.0.0");
    const services = page.getByTestId("proto-services");
    await expect.poll(() => services.textContent()).toContain("ItemService");
    const rpcs = await services.locator("li li").allTextContents();
    expect(rpcs).toEqual([
      "GetItem(GetItemRequest) → GetItemResponse",
      "ListItems(ListItemsRequest) → ListItemsResponse",
      "CreateItem(CreateItemRequest) → CreateItemResponse",
    ]);
    expect(await page.getByTestId("proto-messages").textContent()).toContain(
      "Item An item. { string id = 1; string name = 2; string description = 3; }",
    );
    await mkdir(`${ROOT}test/artifacts`, { recursive: true });
    await page.screenshot({ path: `${ROOT}test/artifacts/dashboard-protos.png`, fullPage: true });
    await page.close();
  });
});
