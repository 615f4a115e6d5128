import type { PolicySummary } from "./runEval.js";

const COLORS: Record<string, string> = {
  model: "#4e79a7",
  externalTool: "#f28e2b",
  adapterControl: "#e15759",
  cacheRebuild: "#76b7b2",
  answerExtraction: "#59a14f",
  orchestration: "#b07aa1",
};
const LABELS: Record<string, string> = {
  model: "model",
  externalTool: "external tools",
  adapterControl: "adapter control",
  cacheRebuild: "cache rebuild",
  answerExtraction: "answer extraction",
  orchestration: "setup/orchestration",
};

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

/** A self-contained SVG: per policy, mean time per task stacked by category, with accuracy beside it. */
export function renderChart(policies: readonly PolicySummary[]): string {
  const barH = 28, gap = 14, left = 150, width = 560, top = 50;
  const max = Math.max(1, ...policies.map((p) => Object.values(p.meanMs).reduce((a, b) => a + b, 0)));
  const height = top + policies.length * (barH + gap) + 80;
  const bars = policies
    .map((p, i) => {
      const y = top + i * (barH + gap);
      let x = left;
      const segs = Object.entries(p.meanMs)
        .filter(([, ms]) => ms > 0)
        .map(([cat, ms]) => {
          const w = (ms / max) * width;
          const rect = `<rect x="${x.toFixed(1)}" y="${y}" width="${w.toFixed(1)}" height="${barH}" fill="${COLORS[cat]}"><title>${esc(LABELS[cat]!)}: ${(ms / 1000).toFixed(2)} s</title></rect>`;
          x += w;
          return rect;
        })
        .join("");
      return `<text x="${left - 8}" y="${y + barH / 2 + 4}" text-anchor="end">${esc(p.policy)}</text>${segs}<text x="${x + 6}" y="${y + barH / 2 + 4}">${p.meanSeconds.toFixed(2)} s · ${(p.contains * 100).toFixed(0)}% correct</text>`;
    })
    .join("\n");
  const legendY = height - 40;
  const legend = Object.keys(COLORS)
    .map((cat, i) => `<rect x="${20 + i * 125}" y="${legendY}" width="12" height="12" fill="${COLORS[cat]}"/><text x="${36 + i * 125}" y="${legendY + 10}">${esc(LABELS[cat]!)}</text>`)
    .join("");
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${left + width + 220}" height="${height}" font-family="sans-serif" font-size="12">
<text x="20" y="24" font-size="16" font-weight="bold">Mean time per task by category, per policy</text>
${bars}
${legend}
</svg>
`;
}
