import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isPrivateAddress } from "../../src/externalTools/read/addressPolicy.js";
import { fetchPage } from "../../src/externalTools/read/fetchPage.js";

describe("the read tool's address policy", () => {
  it.each([
    ["127.0.0.1", "loopback"],
    ["10.1.2.3", "private"],
    ["169.254.169.254", "link-local (cloud metadata)"],
    ["::1", "IPv6 loopback"],
    ["fe80::1%eth0", "IPv6 link-local with a zone"],
    ["::127.0.0.1", "IPv4-compatible loopback"],
    ["::7f00:1", "IPv4-compatible loopback, hex"],
    ["::ffff:127.0.0.1", "IPv4-mapped loopback"],
    ["::ffff:7f00:1", "IPv4-mapped loopback, hex"],
    ["::ffff:0:a00:1", "IPv4-translated 10.0.0.1"],
    ["64:ff9b::7f00:1", "NAT64 of 127.0.0.1"],
    ["64:ff9b::a9fe:a9fe", "NAT64 of 169.254.169.254"],
    ["64:ff9b:1::808:808", "local-use NAT64"],
    ["2002:7f00:1::", "6to4 of 127.0.0.1"],
    ["2002:c0a8:101::1", "6to4 of 192.168.1.1"],
    ["2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo with client 127.0.0.1"],
    ["not an address", "garbage"],
  ])("blocks %s (%s)", (address) => {
    expect(isPrivateAddress(address)).toBe(true);
  });

  it.each([
    ["93.184.216.34"],
    ["2606:2800:220:1:248:1893:25c8:1946"],
    ["::ffff:5db8:d822"],
    ["64:ff9b::5db8:d822"],
    ["2002:5db8:d822::1"],
  ])("lets public %s through", (address) => {
    expect(isPrivateAddress(address)).toBe(false);
  });
});

describe("fetchPage checks every redirect hop", () => {
  let server: Server;
  let url: string;
  beforeAll(async () => {
    server = createServer((req, res) => {
      const to = new URL(req.url!, "http://x").searchParams.get("to");
      if (to) res.writeHead(302, { location: to }).end();
      else res.writeHead(200, { "content-type": "text/plain" }).end("reached");
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => server.close());

  // the test server is on 127.0.0.1: the policy under test treats that one address as public and every other
  // private address as private, so the first hop is allowed and the check of the next hop is what is tested
  const policy = {
    maxBytes: 10_000,
    timeoutMs: 5_000,
    maxRedirects: 5,
    allowPrivateAddresses: false,
    isPrivate: (a: string) => a !== "127.0.0.1" && isPrivateAddress(a),
  };

  it("follows a redirect to an allowed address", async () => {
    expect((await fetchPage(`${url}/?to=${encodeURIComponent(`${url}/end`)}`, policy)).body).toBe("reached");
  });

  it.each([
    ["http://[::1]:1/"],
    ["http://[::ffff:7f00:2]:1/"],
    ["http://[64:ff9b::a9fe:a9fe]/latest/meta-data"],
    ["http://10.0.0.1/"],
  ])("refuses a redirect to %s", async (target) => {
    const hops = `${url}/?to=${encodeURIComponent(`${url}/?to=${encodeURIComponent(target)}`)}`;
    await expect(fetchPage(hops, policy)).rejects.toThrow(/private or loopback/);
  });
});
