// `npm run check:cycles`, second half: no two folders import each other. dependency-cruiser finds cycles between
// files; this finds them between folders at every depth (src/status -> src/transports and back, say), which a file
// graph without cycles still allows. Reads dependency-cruiser's own JSON, so both checks see the same graph.
import { execFileSync } from "node:child_process";
import { join } from "node:path";

const root = join(import.meta.dirname, "..");
const roots = process.argv.slice(2);
const json = execFileSync(
  process.execPath,
  [
    join(root, "node_modules", ".bin", "depcruise"),
    ...roots,
    "--config",
    ".dependency-cruiser.cjs",
    "--output-type",
    "json",
  ],
  {
    cwd: root,
    encoding: "utf8",
    maxBuffer: 256 * 1024 * 1024,
  },
);
const inRepo = (path) => roots.some((r) => path.startsWith(`${r}/`));
/** The node a path belongs to at `depth`: its first `depth` segments (the file itself when it is shallower). */
const at = (path, depth) => path.split("/").slice(0, depth).join("/");
const edges = new Map(); // "a -> b" at some depth, with one file edge that makes it
for (const module of JSON.parse(json).modules) {
  if (!inRepo(module.source)) continue;
  for (const dep of module.dependencies) {
    if (!inRepo(dep.resolved)) continue;
    const depth = Math.max(module.source.split("/").length, dep.resolved.split("/").length);
    for (let d = 1; d <= depth; d++) {
      const [a, b] = [at(module.source, d), at(dep.resolved, d)];
      if (a !== b && !edges.has(`${a} -> ${b}`)) edges.set(`${a} -> ${b}`, `${module.source} -> ${dep.resolved}`);
    }
  }
}
const problems = [];
for (const [edge, example] of edges) {
  const [a, b] = edge.split(" -> ");
  if (a < b && edges.has(`${b} -> ${a}`))
    problems.push(`${a} <-> ${b}\n    ${example}\n    ${edges.get(`${b} -> ${a}`)}`);
}
if (problems.length) {
  console.error(
    `${problems.length} pair(s) of folders import each other; move the shared part down a layer:\n  ${problems.join("\n  ")}`,
  );
  process.exit(1);
}
console.log(`no two folders import each other (${edges.size} folder edges checked)`);
