// `npm start` builds only when a source is newer than the last build (tsc's own incremental state file).
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, statSync, utimesSync } from "node:fs";
import { join } from "node:path";

const root = join(import.meta.dirname, "..");
const stamp = join(root, "dist", ".tsbuildinfo");
const newest = (path) => {
  const s = statSync(path);
  if (!s.isDirectory()) return s.mtimeMs;
  return Math.max(0, ...readdirSync(path).map((name) => newest(join(path, name))));
};
const inputs = ["src", "bench", "testkit", "training", "tsconfig.json", "package.json"]
  .map((p) => join(root, p))
  .filter(existsSync);
if (existsSync(stamp) && Math.max(...inputs.map(newest)) < statSync(stamp).mtimeMs) process.exit(0);
execFileSync(
  process.execPath,
  [join(root, "node_modules", "typescript", "bin", "tsc"), "-p", join(root, "tsconfig.json")],
  { stdio: "inherit" },
);
execFileSync(process.execPath, [join(root, "scripts", "markBinExecutable.mjs")], { stdio: "inherit" });
// tsc leaves its state file alone when no output changed (a touched file): mark the build current anyway
const now = new Date();
utimesSync(stamp, now, now);
