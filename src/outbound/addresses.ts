/**
 * Which IP addresses a request to a host a tenant names may connect to (model sources, image
 * registries: guard.ts). Such a request is server-side: without this, a tenant could make the
 * platform read cloud metadata (169.254.169.254), Redis or any internal service.
 */
import { BlockList, isIP } from "node:net";

/**
 * Ranges of `address/bits` CIDRs, a BlockList for each family of address checked. An IPv4 range
 * is in both: BlockList matches it against the mapped form (::ffff:a.b.c.d) too. An IPv6 range
 * is in `ipv6` alone, as BlockList would match an IPv4 address against one that covers
 * ::ffff:0:0/96 (::/0 would allow every IPv4 address). `carried` holds the IPv6 forms that carry
 * an address of an IPv4 range the packets really go to: IPv4-compatible (::a.b.c.d), NAT64
 * (64:ff9b::/96) and 6to4 (2002::/16, the address in bits 16-47).
 */
type Ranges = { ipv4: BlockList; ipv6: BlockList; carried: BlockList };

function rangesOf(cidrs: readonly string[]): Ranges {
  const ranges = { ipv4: new BlockList(), ipv6: new BlockList(), carried: new BlockList() };
  for (const cidr of cidrs) {
    const [address = "", bitsText] = cidr.split("/");
    const bits = Number(bitsText);
    if (isIP(address) === 6) {
      ranges.ipv6.addSubnet(address, bits, "ipv6");
      continue;
    }
    ranges.ipv4.addSubnet(address, bits, "ipv4");
    ranges.ipv6.addSubnet(address, bits, "ipv4");
    const [a = 0, b = 0, c = 0, d = 0] = address.split(".").map(Number);
    const word = (high: number, low: number) => ((high << 8) | low).toString(16);
    ranges.carried.addSubnet(`::${address}`, 96 + bits, "ipv6");
    ranges.carried.addSubnet(`64:ff9b::${address}`, 96 + bits, "ipv6");
    ranges.carried.addSubnet(`2002:${word(a, b)}:${word(c, d)}::`, 16 + bits, "ipv6");
  }
  return ranges;
}

const REFUSED = (
  [
    ["unspecified", ["0.0.0.0/8", "::/128"]],
    ["private", ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]],
    ["carrier-grade NAT", ["100.64.0.0/10"]],
    ["loopback", ["127.0.0.0/8", "::1/128"]],
    ["link-local", ["169.254.0.0/16", "fe80::/10"]],
    ["IETF protocol assignments", ["192.0.0.0/24"]],
    ["documentation", ["192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32"]],
    ["benchmarking", ["198.18.0.0/15"]],
    ["multicast", ["224.0.0.0/4", "ff00::/8"]],
    ["reserved", ["240.0.0.0/4"]],
    ["discard", ["100::/64"]],
    ["unique-local", ["fc00::/7"]],
    ["site-local", ["fec0::/10"]],
  ] satisfies [string, string[]][]
).map(([kind, cidrs]) => ({ kind, ranges: rangesOf(cidrs) }));

type Family = "ipv4" | "ipv6";

/** An address as BlockList takes it: `[::1]` as `::1`, with its family. */
function checkable(address: string): [string, Family] {
  const bare = address.replace(/^\[(.*)\]$/, "$1");
  return [bare, isIP(bare) === 6 ? "ipv6" : "ipv4"];
}

/** `own`: the range holding the address as written; `carried`: the one holding the IPv4 address it carries. */
function kindIn(part: "own" | "carried", address: string, family: Family): string | undefined {
  return REFUSED.find(({ ranges }) => ranges[part === "own" ? family : part].check(address, family))?.kind;
}

/**
 * Why an address is not a public one ("loopback", "private", ...), or undefined when it is public.
 * Its own range comes first: `::` and `::1` are not the IPv4-compatible forms of 0.0.0.0 and 0.0.0.1.
 */
export function nonPublicKind(address: string): string | undefined {
  const [bare, family] = checkable(address);
  return kindIn("own", bare, family) ?? kindIn("carried", bare, family);
}

/** What the operator allows beyond public addresses: everything, or these `address/bits` ranges. */
export type AddressPolicy = { allowPrivate: boolean; allowedCidrs: readonly string[] };

/** Undefined when the policy lets a request connect to `address`, else the kind of address refused. */
export function refusedKind(address: string, policy: AddressPolicy): string | undefined {
  const [bare, family] = checkable(address);
  if (isIP(bare) === 0) return "unparseable";
  const own = kindIn("own", bare, family);
  const kind = own ?? kindIn("carried", bare, family);
  if (kind === undefined || policy.allowPrivate) return undefined;
  const allowed = rangesOf(policy.allowedCidrs);
  if (allowed[family].check(bare, family) || (own === undefined && allowed.carried.check(bare, family)))
    return undefined;
  return kind;
}
