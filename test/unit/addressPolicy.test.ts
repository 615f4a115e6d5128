import { describe, expect, it } from "vitest";
import { isPrivateAddress } from "../../src/externalTools/read/addressPolicy.js";

describe("read's address policy", () => {
  it("refuses loopback, private, link-local, shared, multicast and reserved IPv4 ranges at their edges", () => {
    for (const a of [
      "0.0.0.0",
      "0.255.255.255",
      "10.0.0.0",
      "10.255.255.255",
      "100.64.0.0",
      "100.127.255.255",
      "127.0.0.1",
      "127.255.255.255",
      "169.254.0.0",
      "169.254.169.254",
      "169.254.255.255",
      "172.16.0.0",
      "172.31.255.255",
      "192.0.0.0",
      "192.0.0.255",
      "192.168.0.0",
      "192.168.255.255",
      "198.18.0.0",
      "198.19.255.255",
      "224.0.0.0",
      "239.255.255.255",
      "240.0.0.0",
      "255.255.255.255",
    ])
      expect(isPrivateAddress(a), a).toBe(true);
  });

  it("allows the public addresses just outside those ranges", () => {
    for (const a of [
      "1.0.0.0",
      "9.255.255.255",
      "11.0.0.0",
      "100.63.255.255",
      "100.128.0.0",
      "126.255.255.255",
      "128.0.0.0",
      "169.253.255.255",
      "169.255.0.0",
      "172.15.255.255",
      "172.32.0.0",
      "192.0.1.0",
      "192.167.255.255",
      "192.169.0.0",
      "198.17.255.255",
      "198.20.0.0",
      "223.255.255.255",
      "8.8.8.8",
      "93.184.216.34",
    ])
      expect(isPrivateAddress(a), a).toBe(false);
  });

  it("refuses IPv6 loopback, unspecified, unique-local, link-local, site-local and multicast; allows global unicast", () => {
    // fec0::/10 is deprecated site-local (still routed inside some networks); ::2 is IPv4-compatible 0.0.0.2
    for (const a of [
      "::1",
      "::",
      "fc00::",
      "fdff:ffff::1",
      "fe80::1",
      "febf::1",
      "fec0::1",
      "ff00::",
      "ff02::1",
      "::2",
    ])
      expect(isPrivateAddress(a), a).toBe(true);
    for (const a of ["2001:4860:4860::8888", "2606:4700::1111", "fbff::1", "ff0::1"])
      expect(isPrivateAddress(a), a).toBe(false);
  });

  it("sees through IPv4-mapped IPv6, and refuses what is not an address at all", () => {
    expect(isPrivateAddress("::ffff:127.0.0.1")).toBe(true);
    expect(isPrivateAddress("::FFFF:10.1.2.3")).toBe(true);
    expect(isPrivateAddress("::ffff:8.8.8.8")).toBe(false);
    expect(isPrivateAddress("::ffff:7f00:1")).toBe(true); // 127.0.0.1 in hex form
    expect(isPrivateAddress("::ffff:808:808")).toBe(false); // 8.8.8.8
    for (const a of ["", "localhost", "example.org", "999.1.1.1", "1.2.3"]) expect(isPrivateAddress(a), a).toBe(true);
  });
});
