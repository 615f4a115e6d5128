import type { SeededRandom } from "../../src/demo/random.js";
import type { HistoryMessage } from "../../src/sessions/history.js";
import { DEFAULT_MANIFEST } from "../../src/paths.js";
import { LOAD_LORA, OFFLOAD_LORA } from "../../src/library/weightActions.js";
import { CODE_ENTRY } from "../pipeline/continueTraining.js";
import { loadManifest } from "../../src/library/manifest.js";

/**
 * What the chooser's training varies so that the base reads capability descriptions rather than remembering names:
 * every trajectory is shown a library of its own, its capabilities in random order under random aliases with one of
 * several descriptions, beside capabilities the task does not need. The held-out split draws aliases and
 * descriptions training never shows.
 */

/** A role a capability plays: what the oracle's trajectory needs it for (or never needs: a distractor). */
export interface Role {
  /** The alias the oracle's trajectories were recorded under (the default library's), for the roles they use. */
  recorded?: string;
  /** Aliases that say what the capability does, [training, held out]. */
  named: [string[], string[]];
  /** Descriptions, [training, held out]. */
  descriptions: [string[], string[]];
  /** What the activation result tells the adapter to do. */
  instruction: string;
}

export const ROLES: Readonly<Record<string, Role>> = {
  plan: {
    recorded: "plan",
    named: [
      ["plan", "planner", "outline", "strategy", "decompose", "roadmap", "plan-steps", "task_planner"],
      ["blueprint", "architect", "scheme", "agenda"],
    ],
    descriptions: [
      [
        "Planning: decide what to do next; break the task into goals and an ordered plan of actions before any evidence is gathered.",
        "Breaks a question into steps and writes the plan the later stages follow. Use it first.",
        "Task decomposition: lays out the goal, the sub-questions and the order in which to answer them.",
        "Thinks before acting: turns the request into a short ordered list of actions.",
      ],
      [
        "Drafts a step-by-step approach to the request before anything is looked up.",
        "Strategy: works out which steps the task needs and in what order, then hands the plan on.",
      ],
    ],
    instruction:
      "Lay out the goals and the next actions, then release control with offload_lora (put the plan in handoff).",
  },
  search: {
    recorded: "search",
    named: [
      ["search", "research", "lookup", "retrieve", "evidence", "find-facts", "web_search", "searcher"],
      ["investigate", "source", "fact_finder", "gather"],
    ],
    descriptions: [
      [
        "Evidence search and verification: query external tools (search, read), filter what comes back, and check claims against sources.",
        "Looks facts up with the search and read tools and reports the evidence it found.",
        "Retrieval: finds documents that answer the question and quotes the relevant sentence.",
        "Gathers evidence from the corpus: searches, reads results, verifies the claim.",
      ],
      [
        "Consults external sources through the search tool and returns what they state.",
        "Finds and checks supporting facts in the documents before anything is written.",
      ],
    ],
    instruction:
      "Use the external tools to gather and verify evidence; release with offload_lora and summarise the evidence in handoff.",
  },
  code: {
    recorded: "code",
    named: [
      ["code", "compute", "calculator", "python", "program", "run-math", "coder", "calc"],
      ["arithmetic", "interpreter", "numeric", "script"],
    ],
    descriptions: [
      [
        "Computation: write a short program over the values the evidence in the history states, run it with run_code, and hand off its result.",
        "Does arithmetic on values already found: writes Python, runs it with run_code, reports the output.",
        "Calculates differences, sums and other numbers from the evidence by running code.",
        "Programming: turns a numeric question over known values into code and executes it.",
      ],
      [
        "Runs a small script to compute a number from figures gathered earlier.",
        "Numerical work: subtracts, adds or compares the values in the history with run_code.",
      ],
    ],
    instruction:
      "Compute what the task asks from the values found so far, run it with run_code, and release with offload_lora, putting the result in handoff.",
  },
  write: {
    recorded: "write",
    named: [
      ["write", "writer", "answer", "compose", "respond", "final-answer", "author", "reply"],
      ["draft", "finalize", "conclude", "report"],
    ],
    descriptions: [
      [
        "Writing: synthesise the evidence in the history into the final answer; end with a line 'Answer: ...'.",
        "Writes the final answer from the evidence gathered so far. Use it last.",
        "Composes the reply to the user from the handoffs above, ending with 'Answer: ...'.",
        "Answer writing: turns the collected evidence into a short final answer.",
      ],
      [
        "Produces the response the user reads, based on what earlier stages found.",
        "Final stage: states the answer in one line, from the evidence in the history.",
      ],
    ],
    instruction:
      "Write the final answer from the evidence above, ending with 'Answer: ...', then release with offload_lora.",
  },
  translate: {
    named: [
      ["translate", "translator", "localize", "lang"],
      ["interpret", "multilingual"],
    ],
    descriptions: [
      [
        "Translation: renders text from one language into another.",
        "Translates a passage into the language the user asks for.",
      ],
      ["Converts text between languages, keeping its meaning."],
    ],
    instruction: "Translate the text asked for, then release with offload_lora.",
  },
  summarize: {
    named: [
      ["summarize", "summary", "digest", "tldr"],
      ["condense", "abstract"],
    ],
    descriptions: [
      ["Summarisation: shortens a long document into its key points.", "Writes a brief summary of a given text."],
      ["Condenses a long passage the user supplies into a few sentences."],
    ],
    instruction: "Summarise the text, then release with offload_lora.",
  },
  critique: {
    named: [
      ["critique", "review", "critic", "proofread"],
      ["audit", "feedback"],
    ],
    descriptions: [
      [
        "Reviews a draft the user wrote and lists its weaknesses.",
        "Proofreading: corrects grammar and style in a given text.",
      ],
      ["Gives feedback on the quality of a piece of writing."],
    ],
    instruction: "Review the draft, then release with offload_lora.",
  },
  format: {
    named: [
      ["format", "tabulate", "markdown", "layout"],
      ["prettify", "table_maker"],
    ],
    descriptions: [
      ["Formatting: lays data out as a Markdown table or list.", "Reformats given text into JSON, YAML or a table."],
      ["Turns structured data into a neatly formatted table."],
    ],
    instruction: "Format the data, then release with offload_lora.",
  },
  email: {
    named: [
      ["email", "mailer", "letter", "memo"],
      ["correspondence", "outreach"],
    ],
    descriptions: [
      [
        "Drafts emails and letters in a polite business tone.",
        "Writes a message to a named recipient on the user's behalf.",
      ],
      ["Composes correspondence: invitations, replies and reminders."],
    ],
    instruction: "Draft the message, then release with offload_lora.",
  },
  sql: {
    named: [
      ["sql", "query-db", "database", "tables"],
      ["warehouse", "db_query"],
    ],
    descriptions: [
      [
        "Writes SQL queries against the company's sales database.",
        "Database access: answers questions about stored records with SQL.",
      ],
      ["Queries relational tables of customer orders."],
    ],
    instruction: "Write and explain the query, then release with offload_lora.",
  },
};

/** Aliases that say nothing of the capability: its description is all there is to go by. [training, held out] */
const OPAQUE: [string[], string[]] = [
  ["alpha", "beta", "gamma", "delta", "kappa", "omega", "unit-7", "mod_a", "mod_b", "x1", "x2", "lora-3", "slot4"],
  ["sigma", "theta", "zeta", "cap-9", "mod_q", "k5", "lora-11", "slot8"],
];

/** One capability as a trajectory's library lists it. */
export interface ShownCapability {
  role: string;
  alias: string;
  description: string;
  activation: string;
  release: string;
}

export type Split = "training" | "held-out";

/** Of the training libraries, the share that is the default library itself (its aliases, order and texts). */
const DEFAULT_SHARE = 0.25;

/**
 * The default library as a session lists it (adapters/manifest.json, then code as register_adapter inserts it): the
 * roles `needs` names, with code listed half the time when they do not.
 */
function defaultLibrary(rng: SeededRandom, needs: readonly string[]): ShownCapability[] {
  const entries = [...loadManifest(DEFAULT_MANIFEST), CODE_ENTRY];
  const listed = entries.filter((e) => needs.includes(e.alias) || (e.alias === CODE_ENTRY.alias && rng.next() < 0.5));
  return listed.map((e) => ({
    role: e.alias,
    alias: e.alias,
    description: e.description,
    activation: e.activation!,
    release: e.release!,
  }));
}

/**
 * A library for one trajectory: the roles it `needs` (in the oracle's order) and 0-3 distractors, in random order,
 * each under a random alias (half the time one that says nothing) and one of its descriptions of `split`; in
 * training, a quarter of the time the default library as it is.
 */
export function drawLibrary(rng: SeededRandom, needs: readonly string[], split: Split): ShownCapability[] {
  if (split === "training" && rng.next() < DEFAULT_SHARE) return defaultLibrary(rng, needs);
  const k = split === "training" ? 0 : 1;
  const distractors = rng
    .shuffled(Object.keys(ROLES).filter((r) => !ROLES[r]!.recorded))
    .slice(0, Math.floor(rng.next() * 4));
  const used = new Set<string>();
  const shown = [...needs, ...distractors].map((role) => {
    const r = ROLES[role]!;
    let alias: string;
    do alias = rng.pick(rng.next() < 0.5 ? r.named[k] : OPAQUE[k]);
    while (used.has(alias));
    used.add(alias);
    return {
      role,
      alias,
      description: rng.pick(r.descriptions[k]),
      activation: `Capability "${alias}" is active. ${r.instruction}`,
      release: `Capability "${alias}" released. The base model continues; load another capability when the task needs one.`,
    };
  });
  return rng.shuffled(shown);
}

/**
 * A recorded history as a session of `library` shows it: each load names the role's alias there, and each weight
 * action's result is that library's text. The base's turns are otherwise unchanged.
 */
export function renameHistory(
  messages: readonly HistoryMessage[],
  library: readonly ShownCapability[],
): HistoryMessage[] {
  const byRecorded = new Map(library.map((c) => [ROLES[c.role]!.recorded, c]));
  const texts = new Map<string, string>();
  const out: HistoryMessage[] = [];
  let active: ShownCapability | undefined;
  for (const m of messages) {
    if (m.role === "assistant") {
      const calls = m.toolCalls.map((c) => {
        if (c.name === LOAD_LORA) {
          const shown = byRecorded.get(String(c.arguments.adapter));
          if (!shown) throw new Error(`the library drawn lists no capability for "${String(c.arguments.adapter)}"`);
          active = shown;
          texts.set(c.id, shown.activation);
          return { ...c, arguments: { ...c.arguments, adapter: shown.alias } };
        }
        if (c.name === OFFLOAD_LORA && active) texts.set(c.id, active.release);
        return c;
      });
      const adapter = m.adapter === null ? null : (byRecorded.get(m.adapter)?.alias ?? m.adapter);
      out.push({ ...m, adapter, toolCalls: calls });
    } else if (m.role === "tool" && m.internal && texts.has(m.callId) && !m.isError) {
      out.push({ ...m, content: texts.get(m.callId)! });
    } else out.push(m);
  }
  return out;
}
