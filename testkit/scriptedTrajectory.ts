import type { ChatTurn, Conversation } from "../src/engine/index.js";

/** The two weight actions over the demo library, as the model reads them. */
export const WEIGHT_FUNCTIONS: Conversation["functions"] = {
  load_lora: {
    description: "Activate a capability adapter.",
    parameters: { type: "object", properties: { adapter: { enum: ["plan", "search", "write"] } } },
  },
  offload_lora: {
    description: "Release the active adapter.",
    parameters: { type: "object", properties: { handoff: { type: "string" } } },
  },
};

const FUNCTIONS: Conversation["functions"] = {
  ...WEIGHT_FUNCTIONS,
  search: {
    description: "Search the corpus.",
    parameters: { type: "object", properties: { query: { type: "string" } } },
  },
};

/**
 * The history of a scripted WeAct trajectory after `steps` exchanges (load, search, offload, ...), each an
 * assistant turn with its tool call and result, as the harness appends them. Append-only: the history
 * after n steps is a prefix of the history after n+1, which is what lets a lane reuse its cache.
 */
export function scriptedTrajectory(steps: number): Conversation {
  const turns: ChatTurn[] = [
    { role: "system", text: "You are a research agent. Use your capabilities." },
    { role: "user", text: "Which river flows through Paris, how long is it, and which seas does it reach?" },
  ];
  for (let i = 0; i < steps; i++) {
    const name = ["load_lora", "search", "offload_lora"][i % 3]!;
    const sentences = "The Seine rises at Source-Seine and crosses Paris before reaching the English Channel. ".repeat(
      i % 4,
    );
    turns.push({
      role: "assistant",
      text: `Step ${i}: I will ${name === "search" ? "look it up" : "change capability"}.`,
      calls: [
        {
          name,
          arguments: name === "search" ? { query: `seine fact ${i}` } : { adapter: "search" },
          result: `result ${i}: the Seine is 777 km long. ${sentences}`,
        },
      ],
    });
  }
  return { turns, functions: FUNCTIONS };
}
