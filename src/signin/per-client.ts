/**
 * Opening sign-ins per client address (docs/security.md, "Anonymous callers"): flows and device
 * codes are made by requests without credentials, and the install-wide cap (open.ts) alone let one
 * client fill it and refuse everyone else. Each client address (an IPv6 client by its /64, which
 * one host is commonly given whole) may open PLATFORM_SIGNIN_OPENS_PER_MINUTE (30) a minute, so at
 * most that times a sign-in's life (about 300) are open for it at once, far below the cap.
 */
import { isIPv4, isIPv6 } from "node:net";
import type { Control } from "../redis/connection.ts";

const WINDOW_MS = 60_000;

/** The bucket an address counts in: an IPv4 address as it is, an IPv6 address by its first 64 bits. */
export function clientBucket(address: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
  if (mapped && isIPv4(mapped)) return mapped;
  if (isIPv4(address)) return address;
  if (!isIPv6(address)) return "unknown";
  const [head = "", tail = ""] = address.toLowerCase().split("%")[0]!.split("::");
  const left = head ? head.split(":") : [];
  const right = address.includes("::") ? (tail ? tail.split(":") : []) : [];
  const groups = [...left, ...Array(8 - left.length - right.length).fill("0"), ...right];
  return `${groups
    .slice(0, 4)
    .map((g) => Number.parseInt(g, 16).toString(16))
    .join(":")}::/64`;
}

/**
 * The client's address: the socket's peer, or with `proxyHops` trusted proxies in front (an
 * ingress), the X-Forwarded-For entry that many hops from the right (what the nearest proxy saw).
 */
export function clientAddress(peer: string | undefined, forwardedFor: string | undefined, proxyHops: number): string {
  if (proxyHops === 0 || !forwardedFor) return peer ?? "unknown";
  const hops = forwardedFor
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  return hops[hops.length - proxyHops] ?? hops[0] ?? peer ?? "unknown";
}

/**
 * Counts one sign-in opened by `address`: "allowed", or "refused" when it has opened `perMinute`
 * this minute already ("refused-first" the first time in the minute, so a flood is logged once).
 */
export async function allowOpenFrom(
  ctl: Control,
  address: string,
  perMinute: number,
  now = Date.now(),
): Promise<"allowed" | "refused" | "refused-first"> {
  const window = Math.floor(now / WINDOW_MS);
  const key = ctl.keys.signinOpensBy(clientBucket(address), String(window));
  const [[, count] = [null, 0]] =
    (await ctl.redis
      .multi()
      .incr(key)
      .pexpire(key, 2 * WINDOW_MS)
      .exec()) ?? [];
  const n = Number(count);
  return n <= perMinute ? "allowed" : n === perMinute + 1 ? "refused-first" : "refused";
}
