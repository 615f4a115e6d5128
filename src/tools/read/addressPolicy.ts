import { BlockList, isIP } from "node:net";

/** Loopback, private, link-local, shared, multicast and reserved ranges: never fetched unless allowed. */
const blocked = new BlockList();
for (const [net, prefix] of [
  ["0.0.0.0", 8], ["10.0.0.0", 8], ["100.64.0.0", 10], ["127.0.0.0", 8], ["169.254.0.0", 16], ["172.16.0.0", 12],
  ["192.0.0.0", 24], ["192.168.0.0", 16], ["198.18.0.0", 15], ["224.0.0.0", 4], ["240.0.0.0", 4],
] as const) blocked.addSubnet(net, prefix, "ipv4");
for (const [net, prefix] of [["::", 128], ["::1", 128], ["fc00::", 7], ["fe80::", 10], ["ff00::", 8]] as const) blocked.addSubnet(net, prefix, "ipv6");

/** IPv4-mapped IPv6 addresses (::ffff:127.0.0.1, ::ffff:7f00:1) are checked by BlockList against the IPv4 ranges. */
export function isPrivateAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 0) return true; // not an address at all: refuse rather than guess
  return blocked.check(address, family === 4 ? "ipv4" : "ipv6");
}
