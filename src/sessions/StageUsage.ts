import { describeEnd, stageSpent, type StageBudget } from "../budgets/budgets.js";

/** Turns, tokens, tool calls and time one adapter stage of a client-driven session has used. */
export class StageUsage {
  private started = Date.now();
  private turns = 0;
  private tokens = 0;
  private toolCalls = 0;
  private turnsWithoutTool = 0;

  constructor(readonly adapter: string) {}

  recordTurn(generated: number, calledATool: boolean): void {
    this.turns++;
    this.tokens += generated;
    this.turnsWithoutTool = calledATool ? 0 : this.turnsWithoutTool + 1;
  }

  /** Time the stage spent waiting on something outside it (a client's tool) does not count against its seconds. */
  pause(ms: number): void {
    this.started += ms;
  }

  recordToolCall(): void {
    this.toolCalls++;
  }

  /** Why the stage must end now, or undefined: the same rule the harness applies. */
  exhausted(b: StageBudget): string | undefined {
    const end = stageSpent(
      {
        turns: this.turns,
        tokens: this.tokens,
        toolCalls: this.toolCalls,
        turnsWithoutTool: this.turnsWithoutTool,
        elapsedMs: Date.now() - this.started,
      },
      b,
    );
    return end && describeEnd(end, b);
  }
}
