import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { callTool, connectClient } from "./mcpClient.js";

/**
 * Other users keeping a server busy: each of `sessions` clients (its own MCP connection over Streamable HTTP, so the
 * fair queue sees separate owners) loops until stopped: create a session, load an adapter, a short turn under it,
 * release it, a turn on the base, close the session, each round with another prompt and the next adapter (or, steady,
 * turn after turn on one weight set). Their
 * one-token decodes meet a measured session's in the engine's decode rounds whenever they share its weights, and
 * their prompts are evaluated between its turns. Used by `npm run check:invariance` and the load-invariance test.
 */

/** One busy turn: how many tokens, and the biases that keep it from ending early or starting a call. */
export interface BusyTurn {
  max_tokens: number;
  token_bias: Record<string, number>;
}

export interface BusyOptions {
  /** The server's base URL (its Streamable HTTP endpoint is `${url}/mcp`). */
  url: string;
  sessions: number;
  /** Adapters the sessions cycle through (each session starts at another); null: the base. */
  adapters: readonly (string | null)[];
  turn: BusyTurn;
  /**
   * Each session keeps one weight set (session i: `adapters[i % n]`) and generates turn after turn on it, a new
   * session every few turns: some session is always decoding under each weight set, so every piece a measured
   * session evaluates meets one in its round. Default: each round loads the next adapter, a turn, releases it, a turn.
   */
  steady?: boolean;
}

/** What the busy sessions did between `start` and `stop`. */
export interface BusyFigures {
  sessions: number;
  /** Sessions created (a session's round is create, load, turn, release, turn, close). */
  rounds: number;
  turns: number;
}

/** Topics of the busy sessions' tasks: each round another prompt, so no two sessions hold the same history. */
const TOPICS = [
  "Which river flows through Paris?",
  "What is the atomic number of Cobalt?",
  "Who discovered penicillin?",
  "What currency does Denmark use?",
  "Which language is spoken in Qatar?",
  "When was the gramophone invented?",
  "What is the highest point of Romania?",
];

/** A turn on the random demo model's and the trained demo's (Qwen) template: no call, no end of turn. */
export const QWEN_BUSY_TURN: BusyTurn = {
  max_tokens: 32,
  token_bias: { "<tool_call>": -100, "<|im_end|>": -100, "<|endoftext|>": -100 },
};
/** The same on Gemma 3's template: its end of turn, its end of text, and the first token of its `||call:` trigger. */
export const GEMMA_BUSY_TURN: BusyTurn = {
  max_tokens: 32,
  token_bias: { "<end_of_turn>": -100, "<eos>": -100, "||": -100 },
};

/** Turns a steady session generates before it makes way for a new one (its history stays short). */
const STEADY_TURNS = 6;

/** A long call: 15 busy sessions queue behind each other for longer than the SDK's default 60 s. */
const LONG = { timeout: 600_000 };

/** How much of a measured call the busy sessions' turns overlapped. */
export interface Overlap {
  /** Share of the call's wall time during which at least one busy turn was in flight (0 to 1). */
  share: number;
  /** Busy turns in flight at some moment during the call. */
  turns: number;
}

/** One measured call's view of the busy turns: how long at least one was in flight, and how many there were. */
export class OverlapWatch {
  readonly since = performance.now();
  private busyMs = 0;
  private turns: number;

  constructor(inFlight: number) {
    this.turns = inFlight;
  }

  busyFor(ms: number): void {
    this.busyMs += ms;
  }

  turnStarted(): void {
    this.turns++;
  }

  overlap(): Overlap {
    const wallMs = performance.now() - this.since;
    return { share: wallMs > 0 ? Math.min(1, this.busyMs / wallMs) : 0, turns: this.turns };
  }
}

export class BusySessions {
  private stopping = false;
  private rounds = 0;
  private turns = 0;
  /** Busy generate calls in flight now. */
  private inFlight = 0;
  private failure: Error | undefined;
  private readonly loops: Promise<void>[] = [];
  /** Sessions whose first turn is in flight or done: start() returns when all are. */
  private firstTurns = 0;
  private allStarted: (() => void) | undefined;
  /** The measured calls running now (`watch` .. `overlap`). */
  private readonly watches = new Set<OverlapWatch>();
  /** When `inFlight` last changed. */
  private changedAt = performance.now();

  private constructor(
    private readonly options: BusyOptions,
    private readonly clients: { client: Client; close: () => Promise<void> }[],
  ) {}

  /** Connects every session's client and starts its loop; resolves once every one has a turn in flight. */
  static async start(options: BusyOptions): Promise<BusySessions> {
    const clients = await Promise.all(
      Array.from({ length: options.sessions }, () => connectClient("http", { url: options.url })),
    );
    const busy = new BusySessions(options, clients);
    const started = new Promise<void>((resolve) => (busy.allStarted = resolve));
    for (const [i, { client }] of clients.entries()) busy.loops.push(busy.loop(client, i));
    await started;
    if (busy.failure) {
      await busy.stop().catch(() => undefined);
      throw busy.failure;
    }
    return busy;
  }

  /** Starts timing how much the busy turns overlap a measured call (several may run at once). */
  watch(): OverlapWatch {
    this.account();
    const w = new OverlapWatch(this.inFlight);
    this.watches.add(w);
    return w;
  }

  /** How much the busy turns overlapped the call since its `watch`. */
  overlap(w: OverlapWatch): Overlap {
    this.account();
    this.watches.delete(w);
    return w.overlap();
  }

  /**
   * Lets every session finish its round, closes the clients and reports what they did; a failed call of any session
   * fails here with its message.
   */
  async stop(): Promise<BusyFigures> {
    this.stopping = true;
    await Promise.allSettled(this.loops);
    await Promise.all(this.clients.map((c) => c.close()));
    if (this.failure) throw this.failure;
    return { sessions: this.options.sessions, rounds: this.rounds, turns: this.turns };
  }

  private async loop(client: Client, index: number): Promise<void> {
    const { adapters } = this.options;
    try {
      for (let round = 0; !this.stopping; round++) {
        const topic = TOPICS[(index + round) % TOPICS.length]!;
        const { session_id } = await callTool<{ session_id: string }>(client, "create_session", {
          task: `Busy session ${index}, round ${round}: ${topic}`,
          tools: [],
        });
        try {
          if (this.options.steady)
            await this.steadyRound(client, session_id, adapters[index % adapters.length]!, round);
          else await this.cycleRound(client, session_id, adapters[(index + round) % adapters.length]!, round);
        } finally {
          await callTool(client, "close_session", { session_id });
        }
        this.rounds++;
      }
    } catch (err) {
      this.failure ??= err as Error;
      // start() returns rather than wait for a first turn that never comes
      this.started();
    }
  }

  /** Load the adapter, a turn under it, release it, a turn on the base. */
  private async cycleRound(client: Client, session_id: string, adapter: string | null, round: number): Promise<void> {
    if (adapter) await callTool(client, "load_lora", { session_id, adapter }, LONG);
    await this.generate(client, session_id, round === 0);
    if (adapter) await callTool(client, "offload_lora", { session_id }, LONG);
    await this.generate(client, session_id, false);
  }

  /** Load the adapter, then turn after turn under it. */
  private async steadyRound(client: Client, session_id: string, adapter: string | null, round: number): Promise<void> {
    if (adapter) await callTool(client, "load_lora", { session_id, adapter }, LONG);
    for (let turn = 0; turn < STEADY_TURNS && !this.stopping; turn++)
      await this.generate(client, session_id, round === 0 && turn === 0);
  }

  private started(): void {
    if (++this.firstTurns >= this.options.sessions) this.allStarted?.();
  }

  /** Adds the time since `inFlight` last changed to every watch's busy time, when a turn was in flight. */
  private account(): void {
    const now = performance.now();
    if (this.inFlight > 0) for (const w of this.watches) w.busyFor(now - Math.max(this.changedAt, w.since));
    this.changedAt = now;
  }

  private async generate(client: Client, session_id: string, first: boolean): Promise<void> {
    this.account();
    this.inFlight++;
    for (const w of this.watches) w.turnStarted();
    if (first) this.started();
    try {
      await callTool(client, "generate", { session_id, ...this.options.turn }, LONG);
      this.turns++;
    } finally {
      this.account();
      this.inFlight--;
    }
  }
}
