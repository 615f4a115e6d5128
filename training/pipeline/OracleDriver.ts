import type { BackgroundWork } from "../../src/engine/index.js";
import { loadedAdapter } from "../../src/export/segment.js";
import type {
  GenerateRequest,
  ModelCall,
  ModelTurn,
  TrajectoryDriver,
  WeightOutcome,
} from "../../src/harness/driver.js";
import type { HistoryMessage } from "../../src/sessions/history.js";
import { LOAD_LORA, OFFLOAD_LORA } from "../../src/sessions/modelFunctions.js";
import type { SessionService } from "../../src/sessions/SessionService.js";
import { sentence, type Fact } from "./facts.js";

/** The stages an ideal trajectory goes through, in order: what the base learns to choose. */
export const ORACLE_WORKFLOW = ["plan", "search", "write"] as const;

/** The ideal plan stage's handoff, and the search stage's query, for a question about `fact`. */
export const planHandoff = (f: Pick<Fact, "relation" | "entity">) => `Look up the ${f.relation} of ${f.entity}.`;
export const searchQuery = (f: Pick<Fact, "relation" | "entity">) => `${f.relation} of ${f.entity}`;

/**
 * The teacher of the demo library: a trajectory driver whose turns are the ideal ones for a question about
 * `fact`, written into the session as the model's turns (SessionService.recordTurn), while the weight actions,
 * the tools and the history are the real ones of a server session. The policies (hard, soft) drive it as they
 * drive the model, and the run is traced as any run is, so the unchanged `export` makes training samples of it.
 * It reads the evidence from the tool results it got, never from `fact` (only the question's terms come from
 * there), so what the adapters learn to copy is what the corpus says.
 */
export class OracleDriver implements TrajectoryDriver {
  constructor(
    private readonly inner: TrajectoryDriver,
    private readonly sessions: SessionService,
    private readonly owner: string,
    private readonly sessionId: string,
    private readonly fact: Pick<Fact, "relation" | "entity">,
  ) {}

  get adapters() {
    return this.inner.adapters;
  }

  get tools() {
    return this.inner.tools;
  }

  active(): string | null {
    return this.inner.active();
  }

  async generate(_request: GenerateRequest): Promise<ModelTurn> {
    const turn = this.idealTurn(this.sessions.get(this.owner, this.sessionId).history);
    const calls = await this.sessions.recordTurn(this.owner, this.sessionId, turn);
    return {
      text: turn.text,
      calls: calls.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments })),
      adapter: this.active(),
      generated: 0,
      prompt: 0,
      cached: 0,
      finishReason: calls.length ? "functionCalls" : "stop",
    };
  }

  /** What the weights now active should write next, given the history so far. */
  idealTurn(history: readonly HistoryMessage[]): {
    text: string;
    calls: { name: string; arguments: Record<string, unknown> }[];
  } {
    const { relation, entity } = this.fact;
    const active = this.active();
    const stage = currentStage(history);
    if (active === null) {
      const loaded = new Set(history.map((_, i) => loadedAdapter(history, i)));
      const next = ORACLE_WORKFLOW.find((a) => !loaded.has(a));
      return next ? { text: "", calls: [{ name: LOAD_LORA, arguments: { adapter: next } }] } : { text: "", calls: [] };
    }
    if (active === "plan")
      return {
        text: `Plan: search for the ${relation} of ${entity}, then write the answer.`,
        calls: [{ name: OFFLOAD_LORA, arguments: { handoff: planHandoff(this.fact) } }],
      };
    if (active === "search") {
      const called = stage.flatMap((m) => (m.role === "assistant" ? m.toolCalls.map((c) => c.name) : []));
      if (!called.includes("search"))
        return { text: "", calls: [{ name: "search", arguments: { query: searchQuery(this.fact) } }] };
      const results = stage.filter((m) => m.role === "tool" && !m.internal && !m.isError).map((m) => m.content);
      const evidence = results.map((r) => findEvidence(r, relation, entity)).find((e) => e !== undefined);
      if (evidence) return { text: "", calls: [{ name: OFFLOAD_LORA, arguments: { handoff: evidence } }] };
      const id = called.includes("read") ? undefined : firstResultId(results[0] ?? "");
      if (id) return { text: "", calls: [{ name: "read", arguments: { id_or_url: id } }] };
      return { text: "", calls: [{ name: OFFLOAD_LORA, arguments: { handoff: "No evidence found." } }] };
    }
    if (active === "write") {
      const value = lastHandoffs(history)
        .map((h) => findEvidence(h, relation, entity))
        .find((e) => e !== undefined);
      const answer = value ? value.slice(sentence({ relation, entity, value: "" }).length - 1, -1) : "unknown";
      return { text: `Answer: ${answer}`, calls: [{ name: OFFLOAD_LORA, arguments: {} }] };
    }
    return { text: "", calls: [{ name: OFFLOAD_LORA, arguments: {} }] };
  }

  load(alias: string, opts: { callId?: string; reason?: string }): Promise<WeightOutcome> {
    return this.inner.load(alias, opts);
  }

  offload(opts: { callId?: string; handoff?: string; reason?: string }): Promise<WeightOutcome> {
    return this.inner.offload(opts);
  }

  runTool(call: ModelCall, signal: AbortSignal) {
    return this.inner.runTool(call, signal);
  }

  reject(callId: string, message: string): Promise<void> {
    return this.inner.reject(callId, message);
  }

  note(text: string): Promise<void> {
    return this.inner.note(text);
  }

  room() {
    return this.inner.room();
  }

  elide(needed: number) {
    return this.inner.elide(needed);
  }

  plan(upcoming: readonly (string | null)[]): void {
    this.inner.plan(upcoming);
  }

  background(): BackgroundWork {
    return this.inner.background();
  }
}

/** The sentence of `text` that states the relation of the entity, as the corpus writes it. */
export function findEvidence(text: string, relation: string, entity: string): string | undefined {
  const opening = sentence({ relation, entity, value: "" }).slice(0, -1);
  const at = text.indexOf(opening);
  if (at < 0) return undefined;
  const end = text.indexOf(".", at + opening.length);
  return end < 0 ? undefined : text.slice(at, end + 1);
}

/** The messages since the last successful load (the active stage), or the whole history on the base. */
function currentStage(history: readonly HistoryMessage[]): readonly HistoryMessage[] {
  for (let i = history.length - 1; i >= 0; i--) {
    const m = history[i]!;
    if (m.role === "assistant" && m.toolCalls.some((c) => c.name === LOAD_LORA)) return history.slice(i + 1);
  }
  return history;
}

/** Handoffs of the releases so far, the latest first. */
function lastHandoffs(history: readonly HistoryMessage[]): string[] {
  return history
    .flatMap((m) =>
      m.role === "assistant"
        ? m.toolCalls
            .filter((c) => c.name === OFFLOAD_LORA && typeof c.arguments.handoff === "string")
            .map((c) => String(c.arguments.handoff))
        : [],
    )
    .reverse();
}

/** The id of the first result in a search tool's text ("1. [id] title: snippet"). */
function firstResultId(results: string): string | undefined {
  return /^1\. \[([^\]]+)\]/m.exec(results)?.[1];
}
