/**
 * Which IP addresses a model source may connect to. Fetching a URL the client
 * names is a server-side request: without this, a tenant could make the
 * platform read cloud metadata (169.254.169.254), Redis or any internal service.
 */
import { isIPv4, isIPv6 } from "node:net";

export type Ip = { v: 4 | 6; bytes: Uint8Array };
export type Cidr = { ip: Ip; bits: number; text: string };

/** A textual IPv4 or IPv6 address (brackets allowed) as bytes; undefined when it is not one. */
export function parseIp(text: string): Ip | undefined {
  const s = text.startsWith("[") && text.endsWith("]") ? text.slice(1, -1) : text;
  if (isIPv4(s)) return { v: 4, bytes: Uint8Array.from(s.split(".").map(Number)) };
  if (!isIPv6(s)) return undefined;
  const bare = s.replace(/%.*$/, ""); // a zone id (fe80::1%eth0) does not change the range
  let head = bare;
  let tail: number[] = [];
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(bare);
  if (dotted) {
    const v4 = dotted[1]!.split(".").map(Number);
    tail = [(v4[0]! << 8) | v4[1]!, (v4[2]! << 8) | v4[3]!];
    head = bare.slice(0, -dotted[1]!.length).replace(/:$/, "");
    if (head.endsWith(":") || head === "") head += ":";
  }
  const [left, right] = head.includes("::") ? head.split("::") : [head, undefined];
  const words = (part: string | undefined) => (part ? part.split(":").filter((w) => w !== "").map((w) => parseInt(w, 16)) : []);
  const l = words(left);
  const r = [...words(right), ...tail];
  const groups = right === undefined ? [...l, ...tail] : [...l, ...new Array(8 - l.length - r.length).fill(0), ...r];
  if (groups.length !== 8) return undefined;
  const bytes = new Uint8Array(16);
  groups.forEach((g, i) => {
    bytes[i * 2] = g >> 8;
    bytes[i * 2 + 1] = g & 0xff;
  });
  return { v: 6, bytes };
}

/** `10.0.0.0/8`, `fd00::/8` or a single address; undefined when malformed. */
export function parseCidr(text: string): Cidr | undefined {
  const [addr, bitsText] = text.trim().split("/");
  const ip = parseIp(addr ?? "");
  if (!ip) return undefined;
  const max = ip.v === 4 ? 32 : 128;
  const bits = bitsText === undefined ? max : Number(bitsText);
  if (!Number.isInteger(bits) || bits < 0 || bits > max || (bitsText !== undefined && !/^\d+$/.test(bitsText))) return undefined;
  return { ip, bits, text: text.trim() };
}

export function inCidr(ip: Ip, cidr: Cidr): boolean {
  if (ip.v !== cidr.ip.v) return false;
  for (let bit = 0; bit < cidr.bits; bit++) {
    const mask = 0x80 >> bit % 8;
    if ((ip.bytes[bit >> 3]! & mask) !== (cidr.ip.bytes[bit >> 3]! & mask)) return false;
  }
  return true;
}

const REFUSED: [string, string][] = [
  ["0.0.0.0/8", "unspecified"],
  ["10.0.0.0/8", "private"],
  ["100.64.0.0/10", "carrier-grade NAT"],
  ["127.0.0.0/8", "loopback"],
  ["169.254.0.0/16", "link-local"],
  ["172.16.0.0/12", "private"],
  ["192.0.0.0/24", "IETF protocol assignments"],
  ["192.0.2.0/24", "documentation"],
  ["192.168.0.0/16", "private"],
  ["198.18.0.0/15", "benchmarking"],
  ["198.51.100.0/24", "documentation"],
  ["203.0.113.0/24", "documentation"],
  ["224.0.0.0/4", "multicast"],
  ["240.0.0.0/4", "reserved"],
  ["::/128", "unspecified"],
  ["::1/128", "loopback"],
  ["100::/64", "discard"],
  ["2001:db8::/32", "documentation"],
  ["fc00::/7", "unique-local"],
  ["fe80::/10", "link-local"],
  ["fec0::/10", "site-local"],
  ["ff00::/8", "multicast"],
];
const REFUSED_CIDRS = REFUSED.map(([text, kind]) => ({ cidr: parseCidr(text)!, kind }));

/** IPv6 forms that carry an IPv4 address the packets really go to (mapped, compatible, NAT64, 6to4). */
function embeddedIpv4(ip: Ip): Ip | undefined {
  if (ip.v !== 6) return undefined;
  const b = ip.bytes;
  const zeros = (from: number, to: number) => b.slice(from, to).every((x) => x === 0);
  if (zeros(0, 10) && b[10] === 0xff && b[11] === 0xff) return { v: 4, bytes: b.slice(12) }; // ::ffff:a.b.c.d
  if (zeros(0, 12) && !zeros(12, 16) && !(zeros(12, 15) && b[15] === 1)) return { v: 4, bytes: b.slice(12) }; // ::a.b.c.d
  if (b[0] === 0x00 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && zeros(4, 12)) return { v: 4, bytes: b.slice(12) }; // 64:ff9b::/96
  if (b[0] === 0x20 && b[1] === 0x02) return { v: 4, bytes: b.slice(2, 6) }; // 2002::/16
  return undefined;
}

/** Why an address is not a public one ("loopback", "private", ...), or undefined when it is public. */
export function nonPublicKind(ip: Ip): string | undefined {
  const inner = embeddedIpv4(ip);
  if (inner) return nonPublicKind(inner);
  return REFUSED_CIDRS.find(({ cidr }) => inCidr(ip, cidr))?.kind;
}

export type AddressPolicy = { allowPrivate: boolean; allowedCidrs: Cidr[] };

/** Undefined when the policy lets a source connect to `address`, else the kind of address refused. */
export function refusedKind(address: string, policy: AddressPolicy): string | undefined {
  const ip = parseIp(address);
  if (!ip) return "unparseable";
  const kind = nonPublicKind(ip);
  if (kind === undefined || policy.allowPrivate) return undefined;
  const candidates = [ip, embeddedIpv4(ip)].filter((x): x is Ip => x !== undefined);
  if (policy.allowedCidrs.some((c) => candidates.some((x) => inCidr(x, c)))) return undefined;
  return kind;
}
