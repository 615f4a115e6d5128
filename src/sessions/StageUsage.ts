import type { StageBudget } from "../harness/budgets.js";
import { describeEnd, type StageEnd } from "../harness/stage.js";

/** Turns, tokens, tool calls and time one adapter stage has used, against its budget. */
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

  /** Why the stage must end now, or undefined. */
  exhausted(b: StageBudget): string | undefined {
    const end: StageEnd | undefined =
      this.turns >= b.turns ? "budget:turns"
      : this.tokens >= b.tokens ? "budget:tokens"
      : this.toolCalls >= b.toolCalls ? "budget:tool_calls"
      : Date.now() - this.started >= b.seconds * 1000 ? "budget:seconds"
      : this.turnsWithoutTool >= b.noToolTurns ? "no_tool"
      : undefined;
    return end && describeEnd(end, b);
  }
}
