/**
 * The one guarded resolver every request to a host a tenant names goes through (model sources,
 * image registries; docs/security.md, "Outbound calls a tenant names"). The address check runs
 * inside the DNS lookup the socket connects with, so the address checked is the address
 * connected to and a name that re-resolves (DNS rebinding) cannot slip through. Redirects are
 * never followed here: a caller that follows one checks the next hop through this module again.
 */
import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import type { IncomingHttpHeaders, RequestOptions } from "node:http";
import { request as httpsRequest } from "node:https";
import { isIP, type LookupFunction } from "node:net";
import { http } from "../process/node-http.ts";
import { type AddressPolicy, refusedKind } from "./addresses.ts";

export type { AddressPolicy } from "./addresses.ts";

/** How a refusal reads to the caller: the kind of address ("loopback", "private", ...). */
export type Refuse = (kind: string) => Error;

/** A host without its brackets (`[::1]` → `::1`). */
const bare = (host: string) => host.replace(/^\[(.*)\]$/, "$1");

/**
 * The kind of a literal address the policy refuses, else undefined (a name, or an address it
 * allows). Node connects to a literal address without any lookup, so literals are checked here.
 */
export function literalRefusal(host: string, policy: AddressPolicy): string | undefined {
  const address = bare(host);
  return isIP(address) === 0 ? undefined : refusedKind(address, policy);
}

/** A DNS lookup that drops addresses the policy refuses, so a socket can only connect to allowed ones. */
export function guardedLookup(policy: AddressPolicy, refuse: Refuse): LookupFunction {
  return ((hostname: string, options: { all?: boolean; family?: number }, callback: (...args: unknown[]) => void) => {
    dnsLookup(hostname, { family: options.family ?? 0, all: true }, (err, addresses: LookupAddress[]) => {
      if (err) return callback(err);
      const kinds = addresses.map((a) => refusedKind(a.address, policy));
      const allowed = addresses.filter((_a, i) => kinds[i] === undefined);
      if (allowed.length === 0) return callback(refuse(kinds[0] ?? "non-public"));
      if (options.all) return callback(null, allowed);
      callback(null, allowed[0]!.address, allowed[0]!.family);
    });
  }) as LookupFunction;
}

/**
 * The addresses `host` (a name or a literal, in any spelling getaddrinfo reads, `127.1` included)
 * resolves to that the policy allows; none allowed is `refuse(kind)`. For a process the platform
 * starts (skopeo), which cannot take a lookup function: checked before it runs, and pinned where it can be.
 */
export function resolveAllowed(host: string, policy: AddressPolicy, refuse: Refuse): Promise<LookupAddress[]> {
  return new Promise((resolve, reject) =>
    guardedLookup(policy, refuse)(bare(host), { all: true }, (err, addresses) =>
      err ? reject(err) : resolve(addresses as unknown as LookupAddress[]),
    ),
  );
}

export type ProbeAnswer = { status: number; headers: IncomingHttpHeaders };

/**
 * One GET of `url` through the guarded lookup: the status and headers, the body discarded. A
 * redirect is answered as it came (never followed). Errors are the socket's (their `code`), or
 * `refuse(kind)`; the caller decides what the tenant is told.
 */
export function probe(
  url: URL,
  options: { policy: AddressPolicy; refuse: Refuse; timeoutMs: number },
): Promise<ProbeAnswer> {
  const kind = literalRefusal(url.hostname, options.policy);
  if (kind !== undefined) return Promise.reject(options.refuse(kind));
  return new Promise((resolve, reject) => {
    const request: RequestOptions = {
      method: "GET",
      headers: { "user-agent": "platform" },
      agent: false,
      lookup: guardedLookup(options.policy, options.refuse),
    };
    const req = (url.protocol === "https:" ? httpsRequest : http.request)(url, request);
    // The whole request, connect to headers.
    const timer = setTimeout(
      () => req.destroy(Object.assign(new Error("timed out"), { code: "ETIMEDOUT" })),
      options.timeoutMs,
    );
    req.on("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    req.on("response", (res) => {
      clearTimeout(timer);
      res.destroy();
      resolve({ status: res.statusCode ?? 0, headers: res.headers });
    });
    req.end();
  });
}
