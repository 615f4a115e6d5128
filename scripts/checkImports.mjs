// `npm run check:cycles`: one dependency-cruiser run over the import graph, then two verdicts on it. Its own rules
// (.dependency-cruiser.cjs: no import cycle between files), and no two folders that import each other at any depth
// (src/status -> src/transports and back, say), which a file graph without cycles still allows.
import { spawnSync } from "node:child_process";
import { join } from "node:path";

const root = join(import.meta.dirname, "..");
const roots = process.argv.slice(2);
// depcruise exits non-zero when its rules find violations; its JSON on stdout says which
const cruise = spawnSync(
  process.execPath,
  [
    join(root, "node_modules", ".bin", "depcruise"),
    ...roots,
    "--config",
    ".dependency-cruiser.cjs",
    "--output-type",
    "json",
  ],
  { cwd: root, encoding: "utf8", maxBuffer: 256 * 1024 * 1024 },
);
if (!cruise.stdout) {
  console.error(cruise.stderr || `depcruise failed (exit ${cruise.status})`);
  process.exit(1);
}
const { modules, summary } = JSON.parse(cruise.stdout);
const problems = summary.violations.map(
  (v) =>
    `${v.rule.name}: ${v.from} -> ${v.to}${v.cycle ? ` (cycle: ${v.cycle.map((c) => c.name ?? c).join(" -> ")})` : ""}`,
);
const inRepo = (path) => roots.some((r) => path.startsWith(`${r}/`));
/** The node a path belongs to at `depth`: its first `depth` segments (the file itself when it is shallower). */
const at = (path, depth) => path.split("/").slice(0, depth).join("/");
const edges = new Map(); // "a -> b" at some depth, with one file edge that makes it
for (const module of modules) {
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
for (const [edge, example] of edges) {
  const [a, b] = edge.split(" -> ");
  if (a < b && edges.has(`${b} -> ${a}`))
    problems.push(`folders import each other: ${a} <-> ${b}\n    ${example}\n    ${edges.get(`${b} -> ${a}`)}`);
}
if (problems.length) {
  console.error(
    `${problems.length} problem(s) in the import graph; move the shared part down a layer:\n  ${problems.join("\n  ")}`,
  );
  process.exit(1);
}
console.log(
  `no import cycle (${summary.totalCruised} modules, ${summary.totalDependenciesCruised} imports) and no two folders importing each other (${edges.size} folder edges)`,
);
