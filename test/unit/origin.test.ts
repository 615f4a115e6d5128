import { describe, expect, it } from "vitest";
import { isOwnOrigin } from "../../src/http/origin.js";

const NAMES = ["weact.example", "127.0.0.1", "localhost", "[::1]"];

describe("isOwnOrigin", () => {
  it("accepts the page the request was addressed to, with or without a default port", () => {
    expect(isOwnOrigin("http://localhost:7477", "localhost:7477", NAMES)).toBe(true);
    expect(isOwnOrigin("http://[::1]:7477", "[::1]:7477", NAMES)).toBe(true);
    // behind a TLS proxy that keeps Host: the browser's origin leaves out 443, and so does Host
    expect(isOwnOrigin("https://weact.example", "weact.example", NAMES)).toBe(true);
    expect(isOwnOrigin("http://weact.example", "weact.example:80", NAMES)).toBe(true);
  });

  it("refuses another port, another name, another scheme, a missing or malformed origin", () => {
    expect(isOwnOrigin("http://localhost:9999", "localhost:7477", NAMES)).toBe(false);
    expect(isOwnOrigin("http://localhost", "localhost:7477", NAMES)).toBe(false);
    expect(isOwnOrigin("http://evil.example:7477", "evil.example:7477", NAMES)).toBe(false);
    expect(isOwnOrigin("ftp://localhost:7477", "localhost:7477", NAMES)).toBe(false);
    expect(isOwnOrigin("null", "localhost:7477", NAMES)).toBe(false);
    expect(isOwnOrigin(undefined, "localhost:7477", NAMES)).toBe(false);
    expect(isOwnOrigin("http://localhost:7477", undefined, NAMES)).toBe(false);
  });
});
