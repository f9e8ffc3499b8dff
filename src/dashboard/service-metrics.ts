/**
 * A deployed service's live numbers from the gateway's /metrics (docs/services.md, "Metrics"):
 * calls per second, failed calls per second (any Connect code but `ok`) and latency percentiles,
 * from `platform_rpc_requests_total` and `platform_rpc_request_duration_seconds` between two scrapes.
 */
import { type Match, quantileWhere, rate, type Scrape, sumWhere } from "./metrics.ts";

export type ServicePoint = {
  at: number;
  requestsPerSecond: number;
  errorsPerSecond: number;
  p50: number | null;
  p99: number | null;
};

/** The series of one service of one organization (the same name may be deployed by two). */
export const serviceMatch =
  (org: string, service: string): Match =>
  (l) =>
    l.org === org && l.service === service;

export function servicePointBetween(prev: Scrape, next: Scrape, org: string, service: string): ServicePoint {
  const seconds = (next.at - prev.at) / 1000;
  const match = serviceMatch(org, service);
  const failed: Match = (l) => match(l) && l.code !== "ok";
  const counter = (m: Match) =>
    rate(sumWhere(prev, "platform_rpc_requests_total", m), sumWhere(next, "platform_rpc_requests_total", m), seconds);
  return {
    at: next.at,
    requestsPerSecond: counter(match),
    errorsPerSecond: counter(failed),
    p50: quantileWhere(prev, next, "platform_rpc_request_duration_seconds", match, 0.5),
    p99: quantileWhere(prev, next, "platform_rpc_request_duration_seconds", match, 0.99),
  };
}
