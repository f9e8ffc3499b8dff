/**
 * Where items live: PostgreSQL through Prisma when the service has a database (DATABASE_URL), an
 * in-memory list otherwise (for trying the service out; it forgets everything on restart). Both
 * keep creation order, which ListItems follows, and page the same way: a page token is an opaque
 * pointer past the last item of the previous page, so pages stay stable while items are added.
 */
import { randomUUID } from "node:crypto";
import type { PrismaClient } from "./__generated__/prisma/client.js";

export type StoredItem = { id: string; name: string; description: string };
export type Page = { items: StoredItem[]; nextPageToken: string };

export interface ItemStore {
  create(name: string, description: string): Promise<StoredItem>;
  get(id: string): Promise<StoredItem | undefined>;
  /** Items after `pageToken` ("" for the first page), at most `pageSize`, oldest first. */
  list(pageSize: number, pageToken: string): Promise<Page>;
}

/** A page token the store did not hand out. */
export class BadPageToken extends Error {
  constructor(token: string) {
    super(`page_token "${token}" is not one this service returned: pass next_page_token from the previous page`);
  }
}

const encodeToken = (seq: bigint) => Buffer.from(`seq:${seq}`).toString("base64url");

function decodeToken(token: string): bigint {
  if (token === "") return 0n;
  const match = /^seq:(\d{1,19})$/.exec(Buffer.from(token, "base64url").toString("utf8"));
  if (!match?.[1]) throw new BadPageToken(token);
  return BigInt(match[1]);
}

export class MemoryItemStore implements ItemStore {
  private readonly items: (StoredItem & { seq: bigint })[] = [];

  async create(name: string, description: string): Promise<StoredItem> {
    const item = { id: randomUUID(), name, description, seq: BigInt(this.items.length + 1) };
    this.items.push(item);
    return strip(item);
  }

  async get(id: string): Promise<StoredItem | undefined> {
    const item = this.items.find((i) => i.id === id);
    return item && strip(item);
  }

  async list(pageSize: number, pageToken: string): Promise<Page> {
    const after = decodeToken(pageToken);
    const rest = this.items.filter((i) => i.seq > after);
    return page(rest.slice(0, pageSize + 1), pageSize);
  }
}

export class PrismaItemStore implements ItemStore {
  constructor(private readonly prisma: PrismaClient) {}

  async create(name: string, description: string): Promise<StoredItem> {
    return strip(await this.prisma.item.create({ data: { id: randomUUID(), name, description } }));
  }

  async get(id: string): Promise<StoredItem | undefined> {
    const item = await this.prisma.item.findUnique({ where: { id } });
    return item ? strip(item) : undefined;
  }

  async list(pageSize: number, pageToken: string): Promise<Page> {
    const rows = await this.prisma.item.findMany({
      where: { seq: { gt: decodeToken(pageToken) } },
      orderBy: { seq: "asc" },
      // One more than asked: whether there is a next page, without a second query.
      take: pageSize + 1,
    });
    return page(rows, pageSize);
  }
}

function strip(item: StoredItem): StoredItem {
  return { id: item.id, name: item.name, description: item.description };
}

function page(rows: (StoredItem & { seq: bigint })[], pageSize: number): Page {
  const items = rows.slice(0, pageSize);
  const last = items.at(-1);
  return {
    items: items.map(strip),
    nextPageToken: rows.length > pageSize && last ? encodeToken(last.seq) : "",
  };
}
