/**
 * The handlers of {{serviceFullName}} ({{serviceFile}}):
 * one per RPC, typed from the generated descriptors (a missing handler or a wrong field is a
 * compile error). The reference implementation: items in PostgreSQL through Prisma when the
 * service has a database, in memory otherwise.
 */
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { {{serviceExport}} } from "{{protoImport}}";
import type { Database } from "./db.js";
import type { Logger } from "./logger.js";
import { BadPageToken, type ItemStore, MemoryItemStore, PrismaItemStore } from "./store.js";

/** The proto service this process serves (server.ts registers it, health reports it). */
export const service = {{serviceExport}};

export type Deps = { db: Database | undefined; log: Logger };

{{#paginated}}
/** ListItems' page size when the caller asks for none (page_size 0), and the most it may ask for. */
export const DEFAULT_PAGE_SIZE = 50;
export const MAX_PAGE_SIZE = 1000;

{{/paginated}}
export function createHandlers({ db, log }: Deps): ServiceImpl<typeof {{serviceExport}}> {
  const store: ItemStore = db ? new PrismaItemStore(db.prisma) : new MemoryItemStore();
  log.info({ store: db ? "postgresql" : "memory" }, "items store");
  return {
{{getItemComment}}    async getItem(request) {
      if (request.id === "") throw new ConnectError("id: required", Code.InvalidArgument);
      const item = await store.get(request.id);
      if (!item) throw new ConnectError(`item ${request.id} not found`, Code.NotFound);
      return { item };
    },

{{listItemsComment}}    async listItems(request) {
{{#paginated}}
      if (request.pageSize < 0)
        throw new ConnectError(`page_size: must be 0 (the default, ${DEFAULT_PAGE_SIZE}) or more`, Code.InvalidArgument);
      const pageSize = Math.min(request.pageSize || DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE);
      try {
        const page = await store.list(pageSize, request.pageToken);
        return { items: page.items, nextPageToken: page.nextPageToken };
      } catch (e) {
        if (e instanceof BadPageToken) throw new ConnectError(e.message, Code.InvalidArgument);
        throw e;
      }
{{/paginated}}
{{^paginated}}
      // The proto has no page_size/page_token: every item, oldest first, read a page at a time.
      const items = [];
      for (let token = ""; ; ) {
        const page = await store.list(1000, token);
        items.push(...page.items);
        if (page.nextPageToken === "") return { items };
        token = page.nextPageToken;
      }
{{/paginated}}
    },

{{createItemComment}}    async createItem(request) {
      if (request.name.trim() === "") throw new ConnectError("name: required, and not only spaces", Code.InvalidArgument);
      return { item: await store.create(request.name, request.description) };
    },
{{otherHandlers}}  };
}
