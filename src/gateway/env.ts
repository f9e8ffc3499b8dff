import type { ApiKeyRecord } from "../contracts/records.ts";
import type { RequestMeter } from "./ratelimit.ts";

/** Per-request values the gateway's middleware sets for the routes (`meter`: rate limits and usage, src/gateway/ratelimit.ts). */
export type GatewayEnv = { Variables: { apiKey: ApiKeyRecord; requestId: string; meter?: RequestMeter } };
