import type { HistoryMessage } from "../sessions/history.js";
import { callArguments } from "./convert.js";
import { asReadAt } from "./elision.js";
import { capabilitiesOf, segment, type StageSample } from "./segment.js";
import type { Trajectory } from "./recordedTrajectory.js";

/** Tokens in a text, by the model's own tokenizer (the CLI passes the engine's). */
export type TokenCounter = (text: string) => number;

export interface Distribution {
  mean: number;
  p95: number;
}

export interface TokenStats {
  samples: number;
  /** Tokens before the first target, as that target read them (elision applied). */
  context: Distribution;
  /** Tokens of the targets: the adapter's turns and its exit call. */
  target: Distribution;
}

export interface CapabilityStats extends TokenStats {
  capability: string;
}

/** The text of a message as the model read or wrote it; the chat template's own tokens are not counted. */
function messageText(m: HistoryMessage): string {
  if (m.role !== "assistant") return m.content;
  const calls = m.toolCalls.map(
    (c) => `{"name": ${JSON.stringify(c.name)}, "arguments": ${callArguments(c.arguments)}}`,
  );
  return [m.content, ...calls].filter(Boolean).join("\n");
}

const sum = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0);

/** Mean and nearest-rank 95th percentile. */
function distribution(values: readonly number[]): Distribution {
  if (!values.length) return { mean: 0, p95: 0 };
  const sorted = [...values].sort((a, b) => a - b);
  return { mean: sum(values) / values.length, p95: sorted[Math.ceil(0.95 * sorted.length) - 1]! };
}

export function tokenStats(samples: readonly StageSample[], countTokens: TokenCounter): TokenStats {
  const tokens = (messages: readonly HistoryMessage[]) => sum(messages.map((m) => countTokens(messageText(m))));
  return {
    samples: samples.length,
    context: distribution(samples.map((s) => tokens(asReadAt(s.messages, s.targets[0]!, s.keepToolResult)))),
    target: distribution(samples.map((s) => tokens(s.targets.map((t) => s.messages[t]!)))),
  };
}

/** Per capability the trajectories activated: sample counts and context/target token lengths. */
export function datasetStats(trajectories: readonly Trajectory[], countTokens: TokenCounter): CapabilityStats[] {
  const capabilities = [...new Set(trajectories.flatMap(capabilitiesOf))].sort();
  return capabilities.map((capability) => ({
    capability,
    ...tokenStats(
      trajectories.flatMap((t) => segment(t, capability)),
      countTokens,
    ),
  }));
}

export function formatStats(stats: readonly CapabilityStats[]): string {
  const head = ["capability", "samples", "context mean", "context p95", "target mean", "target p95"];
  const rows = stats.map((s) => [
    s.capability,
    String(s.samples),
    s.context.mean.toFixed(0),
    String(s.context.p95),
    s.target.mean.toFixed(0),
    String(s.target.p95),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join("  ")
      .trimEnd();
  return [line(head), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n");
}
