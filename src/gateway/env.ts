import type { ApiKeyRecord } from "../contracts/records.ts";

/** Per-request values the gateway's middleware sets for the routes. */
export type GatewayEnv = { Variables: { apiKey: ApiKeyRecord; requestId: string } };
