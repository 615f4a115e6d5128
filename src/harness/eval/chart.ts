/** What the chart shows of each policy's summary (runEval's PolicySummary has these and more). */
interface ChartRow {
  policy: string;
  tasks: number;
  errors: number;
  context: number;
  degenerate: number;
  contains: number;
  meanMs: Record<string, number>;
}

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
const seconds = (ms: number) => `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;

/** Round axis ticks (1, 2 or 5 times a power of ten) covering 0..max seconds. */
function ticks(maxS: number): number[] {
  const raw = maxS / 5;
  const power = 10 ** Math.floor(Math.log10(raw || 1));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) ?? raw;
  const out: number[] = [];
  for (let t = 0; t <= maxS + 1e-9; t += step) out.push(Number(t.toFixed(6)));
  if (out.at(-1)! < maxS) out.push(Number((out.at(-1)! + step).toFixed(6)));
  return out;
}

/**
 * A self-contained SVG: per policy, mean time per task stacked by category, every segment labelled with its
 * value, on a time axis; beside each bar its total, its accuracy, and how many runs failed (errors) or were
 * ended by the context window or degenerated, so a policy's failures are visible without hovering.
 */
export function renderChart(policies: readonly ChartRow[]): string {
  const barH = 30,
    gap = 34,
    left = 150,
    width = 560,
    top = 50;
  const axis = ticks(
    Math.max(0.001, ...policies.map((p) => Object.values(p.meanMs).reduce((a, b) => a + b, 0))) / 1000,
  );
  const maxMs = axis.at(-1)! * 1000;
  const x = (ms: number) => left + (ms / maxMs) * width;
  const axisY = top + policies.length * (barH + gap) - gap + 12;
  const height = axisY + 90;
  const bars = policies
    .map((p, i) => {
      const y = top + i * (barH + gap);
      let at = 0;
      const segs = Object.entries(p.meanMs)
        .filter(([, ms]) => ms > 0)
        .map(([cat, ms]) => {
          const x0 = x(at),
            w = x(at + ms) - x0;
          at += ms;
          const rect = `<rect x="${x0.toFixed(1)}" y="${y}" width="${w.toFixed(1)}" height="${barH}" fill="${COLORS[cat]}"><title>${esc(LABELS[cat]!)}: ${seconds(ms)}</title></rect>`;
          // the value inside its segment when it fits, else just under it
          const label =
            w >= 44
              ? `<text x="${(x0 + w / 2).toFixed(1)}" y="${y + barH / 2 + 4}" text-anchor="middle" fill="#fff">${seconds(ms)}</text>`
              : `<text x="${(x0 + w / 2).toFixed(1)}" y="${y + barH + 11}" text-anchor="middle" font-size="9">${seconds(ms)}</text>`;
          return rect + label;
        })
        .join("");
      const failures =
        p.errors > 0
          ? `<tspan fill="#c00" font-weight="bold"> · ${p.errors} of ${p.tasks} errors</tspan>`
          : ` · no errors`;
      const context = p.context > 0 ? ` · ${p.context} ended by the window` : "";
      const degenerate = p.degenerate > 0 ? ` · ${p.degenerate} degenerate` : "";
      return `<text x="${left - 8}" y="${y + barH / 2 + 4}" text-anchor="end">${esc(p.policy)}</text>${segs}<text x="${x(at) + 6}" y="${y + barH / 2 + 4}">${seconds(at)} · ${(p.contains * 100).toFixed(0)}% correct${failures}${context}${degenerate}</text>`;
    })
    .join("\n");
  const axisLine = `<line x1="${left}" y1="${axisY}" x2="${left + width}" y2="${axisY}" stroke="#333"/>${axis
    .map(
      (t) =>
        `<line x1="${x(t * 1000).toFixed(1)}" y1="${axisY}" x2="${x(t * 1000).toFixed(1)}" y2="${axisY + 5}" stroke="#333"/><text x="${x(t * 1000).toFixed(1)}" y="${axisY + 18}" text-anchor="middle">${t}</text>`,
    )
    .join("")}<text x="${left + width / 2}" y="${axisY + 34}" text-anchor="middle">mean seconds per task</text>`;
  const legendY = height - 30;
  const legend = Object.keys(COLORS)
    .map(
      (cat, i) =>
        `<rect x="${20 + i * 125}" y="${legendY}" width="12" height="12" fill="${COLORS[cat]}"/><text x="${36 + i * 125}" y="${legendY + 10}">${esc(LABELS[cat]!)}</text>`,
    )
    .join("");
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${left + width + 360}" height="${height}" font-family="sans-serif" font-size="12">
<text x="20" y="24" font-size="16" font-weight="bold">Mean time per task by category, per policy</text>
${bars}
${axisLine}
${legend}
</svg>
`;
}
