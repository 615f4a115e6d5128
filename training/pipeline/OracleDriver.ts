import type { BackgroundWork } from "../../src/engine/index.js";
import { loadedAdapter } from "../../src/export/segment.js";
import type {
  GenerateRequest,
  ModelCall,
  ModelTurn,
  TrajectoryDriver,
  WeightOutcome,
} from "../../src/harness/driver.js";
import { handoffs } from "../../src/harness/runTaskUnderPolicy.js";
import type { HistoryMessage } from "../../src/sessions/history.js";
import { LOAD_LORA, OFFLOAD_LORA } from "../../src/library/weightActions.js";
import type { SessionService } from "../../src/sessions/SessionService.js";
import { differenceSubject, type Difference } from "./computation.js";
import { sentence, type Fact } from "./facts.js";

/** The stages an ideal trajectory goes through, in order: what the base learns to choose. */
export const ORACLE_WORKFLOW = ["plan", "search", "write"] as const;

/**
 * The capability inserted later (`npm run train-demo -- --step continue --train code`): a computation over the facts
 * the earlier stages found. Hard runs prescribe it between search and write; the base was never trained to choose it.
 */
export const CODE = "code";
export const COMPUTATION_WORKFLOW = ["plan", "search", CODE, "write"] as const;

/**
 * A slip the oracle makes upstream of the code stage on purpose, as the frozen plan and search do on computation
 * questions (measured: plan named the second operand in 5 of 20, search released without searching in 10 of 20):
 * the code stage then learns to look up whatever value the history does not state, not only the second operand.
 * `swapped`: plan hands off the second operand, which search then looks up; `unsearched`: search releases at once
 * with the statement's opening and no value.
 */
export type UpstreamSlip = "swapped" | "unsearched";

/** What the oracle answers: one fact, or the difference of two (its first operand is what plan and search see). */
export interface OracleQuestion {
  fact: Pick<Fact, "relation" | "entity">;
  difference?: Pick<Difference, "first" | "second">;
  slip?: UpstreamSlip;
  /** The capabilities the base loads in turn when it chooses (a soft run); default ORACLE_WORKFLOW. */
  workflow?: readonly string[];
  /**
   * A question in any wording whose answer is a span of a document (the Qwen library's questions): the oracle then
   * searches with these queries instead of parsing `fact` out of the template's wording.
   */
  target?: OracleTarget;
}

/** What the oracle knows of a question given with its documents: one query per hop, and the spans each hop finds. */
export interface OracleTarget {
  /**
   * Per hop, the query and the index id of the document it finds, and the queries searched before it that do not
   * (`tries`: the question's own words, which a reader would search first).
   */
  hops: readonly { query: string; document: string; tries?: readonly string[] }[];
  /** What the last hop finds; each earlier hop finds `bridge`, which the next hop's query names. */
  answer: string;
  bridge?: string;
}

/**
 * How the oracle's writer answers: `cite` (the write++ refresh) adds a line after the answer quoting the evidence
 * sentence it was read from, as it stands in the history.
 */
export interface OracleStyle {
  cite?: boolean;
}

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
    private readonly question: OracleQuestion,
    private readonly style: OracleStyle = {},
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
    const { fact, difference, slip, workflow = ORACLE_WORKFLOW, target } = this.question;
    // what plan hands off and search looks up
    const planned = difference && slip === "swapped" ? difference.second : fact;
    const active = this.active();
    const stage = currentStage(history);
    if (active === null) {
      // the base ends its turn once the write stage released (its last turn: the run's final message)
      const loaded = new Set(history.map((_, i) => loadedAdapter(history, i)));
      const next = workflow.find((a) => !loaded.has(a));
      return next ? { text: "", calls: [{ name: LOAD_LORA, arguments: { adapter: next } }] } : { text: "", calls: [] };
    }
    if (target) return targetTurn(active, history, stage, target);
    if (active === "plan")
      return {
        text: `Plan: search for the ${planned.relation} of ${planned.entity}, then write the answer.`,
        calls: [{ name: OFFLOAD_LORA, arguments: { handoff: planHandoff(planned) } }],
      };
    if (active === "search") {
      if (difference && slip === "unsearched")
        return { text: "", calls: [{ name: OFFLOAD_LORA, arguments: { handoff: subjectOf(planned) } }] };
      const evidence = this.lookUp(stage, planned);
      return "call" in evidence
        ? { text: "", calls: [evidence.call] }
        : {
            text: "",
            calls: [{ name: OFFLOAD_LORA, arguments: { handoff: evidence.sentence ?? "No evidence found." } }],
          };
    }
    if (active === CODE) return { text: "", calls: [this.computeCall(history, stage)] };
    if (active === "write") {
      const subject = difference ? differenceSubject(difference) : subjectOf(fact);
      const evidence = lastHandoffs(history)
        .map((h) => findStatement(h, subject))
        .find((e) => e !== undefined);
      const answer = evidence ? evidence.slice(subject.length + " is ".length, -1) : "unknown";
      // write++ answers as write does, then quotes its evidence: the answer line comes where the writer it continues
      // already puts it (measured: quoting first, the refreshed writer released after the quote and dropped the answer)
      const cited = this.style.cite && evidence ? `\nEvidence: ${evidence}` : "";
      // the answer is handed off in the exit call too: a call with arguments parses on every template, and the base
      // reads a release that closes the run
      return { text: `Answer: ${answer}${cited}`, calls: [{ name: OFFLOAD_LORA, arguments: { handoff: answer } }] };
    }
    return { text: "", calls: [{ name: OFFLOAD_LORA, arguments: {} }] };
  }

  /**
   * The next step of looking up one fact within a stage, from the stage's messages so far: search for it, read the
   * first result of that search when the results do not state it, or the sentence stating it (undefined: nothing
   * found).
   */
  private lookUp(
    stage: readonly HistoryMessage[],
    fact: Pick<Fact, "relation" | "entity">,
  ): { call: { name: string; arguments: Record<string, unknown> } } | { sentence?: string } {
    const calls = stage.flatMap((m) => (m.role === "assistant" ? m.toolCalls : []));
    const search = calls.find((c) => c.name === "search" && c.arguments.query === searchQuery(fact));
    if (!search) return { call: { name: "search", arguments: { query: searchQuery(fact) } } };
    const evidence = externalResults(stage)
      .map((r) => findStatement(r, subjectOf(fact)))
      .find((e) => e !== undefined);
    if (evidence) return { sentence: evidence };
    const results = stage.find((m) => m.role === "tool" && m.callId === search.id)?.content ?? "";
    const id = firstResultId(results);
    const read = calls.some((c) => c.name === "read" && c.arguments.id_or_url === id);
    return id && !read ? { call: { name: "read", arguments: { id_or_url: id } } } : {};
  }

  /**
   * The code stage: look up each operand the history does not state yet (plan and search looked up one, unless they
   * slipped), write a program over both values as the history states them, run it, and hand off the sentence stating
   * its output.
   */
  private computeCall(
    history: readonly HistoryMessage[],
    stage: readonly HistoryMessage[],
  ): { name: string; arguments: Record<string, unknown> } {
    const { difference } = this.question;
    const release = (handoff: string) => ({ name: OFFLOAD_LORA, arguments: { handoff } });
    if (!difference) return release("No computation needed.");
    const ran = externalResults(stage, "run_code");
    if (ran.length) {
      const output = /^stdout:\n(.*)$/m.exec(ran.at(-1)!)?.[1]?.trim();
      return release(output ? `${differenceSubject(difference)} is ${output}.` : "The program gave no result.");
    }
    const values: string[] = [];
    for (const operand of [difference.first, difference.second]) {
      const stated = [...externalResults(history), ...lastHandoffs(history)]
        .map((t) => findStatement(t, subjectOf(operand)))
        .find((e) => e !== undefined);
      const found = stated === undefined ? this.lookUp(stage, operand) : { sentence: stated };
      if ("call" in found) return found.call;
      if (found.sentence === undefined) return release("No evidence found.");
      values.push(found.sentence.slice(subjectOf(operand).length + " is ".length, -1));
    }
    // the program the stage learns to write: both values as read, the computation left to the interpreter
    return { name: "run_code", arguments: { language: "python", code: `print(abs(${values[0]} - ${values[1]}))` } };
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

/**
 * The ideal turn of a stage for a question given with its documents: plan names the first search (and a second for
 * two hops, whose subject only the first finds), search runs each hop's query in turn and hands off the sentences that
 * hold what each hop finds (reading a document whose result does not show it), write answers with the span a handoff
 * holds.
 */
function targetTurn(
  active: string,
  history: readonly HistoryMessage[],
  stage: readonly HistoryMessage[],
  target: OracleTarget,
): { text: string; calls: { name: string; arguments: Record<string, unknown> }[] } {
  const release = (handoff: string) => ({ name: OFFLOAD_LORA, arguments: { handoff } });
  // what search runs first: a first guess that will miss is still what the plan names
  const first = target.hops[0]!.tries?.[0] ?? target.hops[0]!.query;
  const then = target.hops.length > 1 ? ", then what it names" : "";
  if (active === "plan")
    return {
      text: `Plan: search for ${first}${then}, then write the answer.`,
      calls: [release(`Look up ${first}${then}.`)],
    };
  if (active === "search") {
    const calls = stage.flatMap((m) => (m.role === "assistant" ? m.toolCalls : []));
    const found: string[] = [];
    for (const [hop, { query, document, tries = [] }] of target.hops.entries()) {
      const span = hop < target.hops.length - 1 ? target.bridge! : target.answer;
      const evidenceFound = () =>
        externalResults(stage)
          .map((r) => sentenceWith(r, span))
          .find((e) => e !== undefined);
      // each try in turn, then the query: a try whose results show the span is searched enough
      let search: (typeof calls)[number] | undefined;
      let evidence: string | undefined;
      for (const q of [...tries, query]) {
        search = calls.find((c) => c.name === "search" && c.arguments.query === q);
        if (!search) return { text: "", calls: [{ name: "search", arguments: { query: q } }] };
        evidence = evidenceFound();
        if (evidence !== undefined) break;
      }
      if (evidence !== undefined) {
        found.push(evidence);
        continue;
      }
      const listed = (stage.find((m) => m.role === "tool" && m.callId === search!.id)?.content ?? "").includes(
        `[${document}]`,
      );
      const read = calls.some((c) => c.name === "read" && c.arguments.id_or_url === document);
      if (listed && !read) return { text: "", calls: [{ name: "read", arguments: { id_or_url: document } }] };
      return { text: "", calls: [release("No evidence found.")] };
    }
    return { text: "", calls: [release(found.join(" "))] };
  }
  if (active === "write") {
    const answer = lastHandoffs(history).some((h) => spanAt(h, target.answer) >= 0) ? target.answer : "unknown";
    return { text: `Answer: ${answer}`, calls: [release(answer)] };
  }
  return { text: "", calls: [release("")] };
}

/** Where `span` stands in `text` as whole words ("Euro" is not in "Europe"), or -1. */
export function spanAt(text: string, span: string): number {
  const wordChar = /[\p{L}\p{N}]/u;
  for (let at = text.indexOf(span); at >= 0; at = text.indexOf(span, at + 1)) {
    const before = text[at - 1] ?? " ";
    const after = text[at + span.length] ?? " ";
    if (!wordChar.test(before) && !wordChar.test(after)) return at;
  }
  return -1;
}

/** The sentence of `text` that holds `span` as whole words (a line's text up to its sentence ends), or undefined. */
export function sentenceWith(text: string, span: string): string | undefined {
  for (const raw of text.split("\n")) {
    // a search result's line opens with its rank, id and title ("1. [id] Title: ..."), and a snippet cut from the
    // middle of its document with an ellipsis
    const line = raw.replace(/^\d+\. \[[^\]]*\][^:]*: /, "").replace(/^…/, "");
    const at = spanAt(line, span);
    if (at < 0) continue;
    // a sentence ends at ". " (or the line's end) outside the span: "D.C." or "3.0" inside it is no end
    const before = line.lastIndexOf(". ", at);
    const after = line.indexOf(". ", at + span.length);
    return line.slice(before < 0 ? 0 : before + 2, after < 0 ? line.length : after + 1).trim();
  }
  return undefined;
}

/** The opening of the sentence that states a fact, as the corpus writes it ("The capital of France"). */
export const subjectOf = (f: Pick<Fact, "relation" | "entity">) =>
  sentence({ ...f, value: "" }).slice(0, -" is .".length);

/** The sentence of `text` that states `subject` ("<subject> is <value>."). */
export function findStatement(text: string, subject: string): string | undefined {
  const opening = `${subject} is `;
  const at = text.indexOf(opening);
  if (at < 0) return undefined;
  const end = text.indexOf(".", at + opening.length);
  return end < 0 ? undefined : text.slice(at, end + 1);
}

/** The stage's results of external tools (of one tool when named), in order. */
function externalResults(stage: readonly HistoryMessage[], tool?: string): string[] {
  return stage.flatMap((m) =>
    m.role === "tool" && !m.internal && !m.isError && (tool === undefined || m.name === tool) ? [m.content] : [],
  );
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
const lastHandoffs = (history: readonly HistoryMessage[]) => handoffs(history).reverse();

/** The id of the first result in a search tool's text ("1. [id] title: snippet"). */
function firstResultId(results: string): string | undefined {
  return /^1\. \[([^\]]+)\]/m.exec(results)?.[1];
}
