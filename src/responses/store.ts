/**
 * Stored responses of the Responses API (`store: true`, OpenAI's default): each organization's
 * own, in Redis, expiring after the configured TTL and bounded per organization in count and
 * bytes (its oldest go first: lua/put.lua). Another organization's id reads as absent (a 404),
 * as everything of an organization is. docs/retention.md says what is kept and how long.
 */
import type { InputItem } from "../contracts/openai/responses.ts";
import type { ListedItem, ResponseObject } from "../contracts/openai/responses-output.ts";
import type { Control } from "../redis/connection.ts";
import { LuaScript } from "../redis/scripts.ts";
import type { ResponsesSettings } from "../settings/responses.ts";

const put = new LuaScript(import.meta.url, "put");

/** A response id as OpenAI makes them and as the routes take them: `resp_` and hex. */
export const RESPONSE_ID = /^resp_[0-9a-f]{16,64}$/;

export type StoredResponse = {
  response: ResponseObject;
  /** This request's input items, as GET …/input_items lists them. */
  input: ListedItem[];
  /** The whole conversation up to and with this response's output, for previous_response_id. */
  context: InputItem[];
  /** Who made it (a key's or user's id), for the logs; ownership is the organization's. */
  owner: string;
};

export class ResponseStore {
  private readonly ctl: Control;
  private readonly settings: ResponsesSettings;

  constructor(ctl: Control, settings: ResponsesSettings) {
    this.ctl = ctl;
    this.settings = settings;
  }

  private keys(org: string, id: string) {
    const base = this.ctl.keys.responses(org);
    return { index: `${base}:index`, sizes: `${base}:sizes`, record: `${base}:r:${id}`, prefix: `${base}:r:` };
  }

  /** Keeps it; false when it alone is over the organization's bytes bound (then it is not kept). */
  async save(org: string, stored: StoredResponse): Promise<boolean> {
    const k = this.keys(org, stored.response.id);
    const { ttlMs, maxPerOrg, maxBytesPerOrg } = this.settings;
    const kept = await put.run(
      this.ctl.redis,
      [k.index, k.sizes, k.record],
      [stored.response.id, JSON.stringify(stored), ttlMs, Date.now(), maxPerOrg, maxBytesPerOrg, k.prefix],
    );
    return kept === 1;
  }

  async get(org: string, id: string): Promise<StoredResponse | undefined> {
    if (!RESPONSE_ID.test(id)) return undefined;
    const raw = await this.ctl.redis.get(this.keys(org, id).record);
    return raw ? (JSON.parse(raw) as StoredResponse) : undefined;
  }

  /** Whether there was one to delete. */
  async delete(org: string, id: string): Promise<boolean> {
    if (!RESPONSE_ID.test(id)) return false;
    const k = this.keys(org, id);
    const [[, deleted] = []] =
      (await this.ctl.redis.multi().del(k.record).zrem(k.index, id).hdel(k.sizes, id).exec()) ?? [];
    return deleted === 1;
  }
}
