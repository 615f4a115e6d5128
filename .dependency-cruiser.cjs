/**
 * Import-graph checks (`npm run check:cycles`): no cycles anywhere in the source tree. The layer rules live in
 * eslint.config.js (no-restricted-imports); this file answers the one question ESLint cannot: is the graph acyclic.
 * `npm run check:cycles` runs it through scripts/checkImports.mjs, which also finds folders that import each other.
 * The layers as a graph: `npx depcruise src --config .dependency-cruiser.cjs --include-only "^src" --collapse
 * "^src/(engines/)?[^/]+" --output-type text`.
 */
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: "no-circular",
      severity: "error",
      comment:
        "A cycle ties modules so that neither can be understood, tested or loaded without the other; break it by moving the shared part down a layer.",
      from: {},
      to: { circular: true },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    exclude: { path: "^(dist|node_modules|models|adapters|reports)/" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: {
      exportsFields: ["exports"],
      conditionNames: ["import", "require", "node", "default", "types"],
      extensions: [".ts", ".js", ".mjs", ".json"],
    },
  },
};
