/**
 * {{serviceFullName}} through a real Connect client against a server on a free port: in memory,
 * and against PostgreSQL when TEST_DATABASE_URL names a database the tests may empty (its `items`
 * table is truncated first).
 */
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { {{serviceExport}} } from "{{protoImportFromTest}}";
import { type Database, openDatabase } from "../src/db.js";
import { createLogger } from "../src/logger.js";
import { type RunningServer, startServer } from "../src/server.js";

const log = createLogger("silent");
const databaseUrl = process.env.TEST_DATABASE_URL;
const stores = [{ name: "in memory", url: undefined as string | undefined }];
if (databaseUrl) stores.push({ name: "in PostgreSQL", url: databaseUrl });
else console.warn("PostgreSQL store tests skipped: set TEST_DATABASE_URL to run them");

async function codeOf(call: Promise<unknown>): Promise<Code | undefined> {
  try {
    await call;
    return undefined;
  } catch (e) {
    return ConnectError.from(e).code;
  }
}

describe.each(stores)("items $name", ({ url }) => {
  let server: RunningServer;
  let db: Database | undefined;
  const client = () => createClient({{serviceExport}}, createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" }));

  beforeAll(async () => {
    db = url ? openDatabase(url, log) : undefined;
    server = await startServer({ port: 0, host: "127.0.0.1", db, shutdownTimeoutMs: 5_000, log });
    await server.ready;
    await db?.pool.query("TRUNCATE items");
  });
  afterAll(async () => {
    await server?.shutdown();
    await db?.close();
  });

  it("creates items with generated ids and reads them back", async () => {
    const { item } = await client().createItem({ name: "first", description: "the first item" });
    expect(item?.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(item).toMatchObject({ name: "first", description: "the first item" });
    const got = await client().getItem({ id: item!.id });
    expect(got.item).toEqual(item);
  });

  it("answers NotFound for an id it does not have", async () => {
    const err = await client()
      .getItem({ id: "no-such-id" })
      .catch((e: unknown) => ConnectError.from(e));
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.NotFound);
    expect((err as ConnectError).rawMessage).toBe("item no-such-id not found");
  });

  it("refuses an empty name with InvalidArgument", async () => {
    expect(await codeOf(client().createItem({ name: "", description: "x" }))).toBe(Code.InvalidArgument);
    expect(await codeOf(client().createItem({ name: "   " }))).toBe(Code.InvalidArgument);
  });

  it("lists items in creation order", async () => {
    for (const name of ["second", "third"]) await client().createItem({ name });
    const { items } = await client().listItems({});
    expect(items.map((i) => i.name)).toEqual(["first", "second", "third"]);
  });
{{#paginated}}

  it("pages with page_size and page_token", async () => {
    const first = await client().listItems({ pageSize: 2 });
    expect(first.items.map((i) => i.name)).toEqual(["first", "second"]);
    expect(first.nextPageToken).not.toBe("");
    const second = await client().listItems({ pageSize: 2, pageToken: first.nextPageToken });
    expect(second.items.map((i) => i.name)).toEqual(["third"]);
    expect(second.nextPageToken).toBe("");
    expect(await codeOf(client().listItems({ pageToken: "not-a-token" }))).toBe(Code.InvalidArgument);
    expect(await codeOf(client().listItems({ pageSize: -1 }))).toBe(Code.InvalidArgument);
  });
{{/paginated}}
});
