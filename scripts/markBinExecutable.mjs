// tsc writes files without the executable bit, and npm marks a package's own bin executable only when it installs
// it (before the build exists in a fresh clone): without this, `npx weact-mcp` answers "Permission denied".
import { chmodSync, readFileSync } from "node:fs";
import { join } from "node:path";

const root = join(import.meta.dirname, "..");
const { bin } = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
for (const file of Object.values(bin)) chmodSync(join(root, file), 0o755);
