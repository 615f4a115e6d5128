import { describe, expect, it } from "vitest";
import { renderChart } from "../../src/harness/eval/chart.js";
import type { PolicySummary } from "../../src/harness/eval/runEval.js";

const summary = (
  policy: string,
  errors: number,
  context: number,
  meanMs: Record<string, number>,
  degenerate = 0,
): PolicySummary => ({
  policy,
  tasks: 3,
  errors,
  context,
  degenerate,
  exact: 0,
  contains: 1 / 3,
  meanSeconds: 0,
  p95Seconds: 0,
  meanSwitches: 0,
  selfLoaded: 0,
  meanRebuiltTokens: 0,
  meanReusedTokens: 0,
  selectionAccuracy: null,
  shares: {},
  meanMs,
});

describe("eval chart", () => {
  it("labels every value, draws a time axis, and marks each policy's errors, window-ended and degenerate runs", () => {
    const svg = renderChart([
      summary("hard", 2, 1, { model: 12_340, externalTool: 50, adapterControl: 0, cacheRebuild: 3_210 }, 1),
      summary("base", 0, 0, { model: 4_000 }),
    ]);
    // every non-zero segment's value is written out, not only in a hover title
    for (const label of ["12.3 s", "0.05 s", "3.21 s", "4.00 s"])
      expect(svg).toMatch(new RegExp(`<text[^>]*>${label.replace(".", "\\.")}</text>`));
    expect(svg).toContain("mean seconds per task");
    expect(svg.match(/<line /g)!.length).toBeGreaterThan(3);
    expect(svg).toMatch(/hard<\/text>[\s\S]*2 of 3 errors[\s\S]*1 ended by the window · 1 degenerate/);
    expect(svg).toMatch(/base<\/text>[\s\S]*no errors/);
    expect(svg).not.toMatch(/base<\/text>[^\n]*degenerate/);
  });
});
