import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadTokenVerifier } from "../../src/http/auth.js";
import { tempDir } from "../helpers/files.js";

/** A token file holding `lines`, as the server reads it (server.tokenFile). */
function tokenFile(lines: string): string {
  const file = join(tempDir("weact-tokens-"), "tokens");
  writeFileSync(file, lines);
  return file;
}

describe("the token file", () => {
  it("refuses a token shorter than 16 characters, named or bare, naming the file and the client; 16 is enough", async () => {
    const short = tokenFile("alice:0123456789abcdef\nbob:0123456789abcde\n");
    expect(() => loadTokenVerifier([{ file: short, scopes: [] }])).toThrow(
      `${short}: the token of "bob" is shorter than 16 characters`,
    );
    const bare = tokenFile("0123456789abcde\n");
    expect(() => loadTokenVerifier([{ file: bare, scopes: [] }])).toThrow(/is shorter than 16 characters/);

    const { verifier, clients } = loadTokenVerifier([{ file: tokenFile("alice:0123456789abcdef\n"), scopes: [] }]);
    expect(clients).toBe(1);
    expect((await verifier.verifyAccessToken("0123456789abcdef")).clientId).toBe("alice");
  });
});
