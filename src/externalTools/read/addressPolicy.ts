import { BlockList, isIP } from "node:net";

/** Loopback, private, link-local, shared, multicast and reserved ranges: never fetched unless allowed. */
const blocked = new BlockList();
for (const [net, prefix] of [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4],
] as const)
  blocked.addSubnet(net, prefix, "ipv4");
for (const [net, prefix] of [
  ["::", 128],
  ["::1", 128],
  ["fc00::", 7],
  ["fe80::", 10],
  ["fec0::", 10],
  ["ff00::", 8],
  // NAT64 for local use only (RFC 8215): what it reaches is the operator's own network
  ["64:ff9b:1::", 48],
] as const)
  blocked.addSubnet(net, prefix, "ipv6");

/**
 * True for an address the read tool must not connect to: a blocked IPv4 range, a blocked IPv6 range, or an IPv6
 * form that carries a blocked IPv4 address (mapped, compatible, translated, NAT64, 6to4, Teredo): each of them
 * ends up at that IPv4 address on some path, so `[::127.0.0.1]` or `64:ff9b::7f00:1` is loopback too.
 */
export function isPrivateAddress(address: string): boolean {
  const bare = address.replace(/%.*$/, ""); // a zone id (fe80::1%eth0) does not change the address
  const family = isIP(bare);
  if (family === 0) return true; // not an address at all: refuse rather than guess
  if (family === 4) return blocked.check(bare, "ipv4");
  const bytes = ipv6Bytes(bare);
  if (!bytes) return true;
  if (embeddedIpv4(bytes).some((v4) => blocked.check(v4, "ipv4"))) return true;
  return blocked.check(bare, "ipv6");
}

/** The IPv4 addresses an IPv6 address carries, by the transition mechanisms that route it to them. */
function embeddedIpv4(b: number[]): string[] {
  const v4 = (at: number, xor = 0) => [0, 1, 2, 3].map((i) => b[at + i]! ^ xor).join(".");
  const zero = (from: number, to: number) => b.slice(from, to).every((x) => x === 0);
  const found: string[] = [];
  if (zero(0, 10) && b[10] === 0xff && b[11] === 0xff) found.push(v4(12)); // ::ffff:a.b.c.d (mapped)
  if (zero(0, 12)) found.push(v4(12)); // ::a.b.c.d (compatible, deprecated)
  if (zero(0, 8) && b[8] === 0xff && b[9] === 0xff && zero(10, 12)) found.push(v4(12)); // ::ffff:0:a.b.c.d (translated)
  // 64:ff9b::/96 (NAT64)
  if (b[0] === 0x00 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && zero(4, 12)) found.push(v4(12));
  if (b[0] === 0x20 && b[1] === 0x02) found.push(v4(2)); // 2002::/16 (6to4)
  // 2001::/32 (Teredo: server, client)
  if (b[0] === 0x20 && b[1] === 0x01 && b[2] === 0x00 && b[3] === 0x00) found.push(v4(4), v4(12, 0xff));
  return found;
}

/** The 16 bytes of a textual IPv6 address (already checked by isIP), including a dotted IPv4 tail. */
function ipv6Bytes(text: string): number[] | undefined {
  let groups = text.toLowerCase();
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(groups);
  if (dotted) {
    const [a, b, c, d] = dotted[1]!.split(".").map(Number) as [number, number, number, number];
    groups = groups.slice(0, -dotted[1]!.length) + `${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = groups.split("::") as [string, string | undefined];
  const left = head ? head.split(":") : [];
  const right = tail ? tail.split(":") : [];
  const fill = tail === undefined ? [] : Array<string>(8 - left.length - right.length).fill("0");
  const all = [...left, ...fill, ...right];
  if (all.length !== 8) return undefined;
  return all.flatMap((g) => {
    const n = parseInt(g, 16);
    return [n >> 8, n & 0xff];
  });
}
