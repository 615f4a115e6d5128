import type { SwitchReport } from "../../engine/index.js";

/** A switch report as MCP results show it (the fields of `switchShape`). */
export function switchView(r: SwitchReport) {
  return {
    switch_ms: r.switchMs,
    cache_strategy: r.strategy,
    rebuild_ms: r.rebuild.ms,
    rebuilt_tokens: r.rebuild.tokens,
    reused_tokens: r.rebuild.reused,
    restored_tokens: r.rebuild.restored,
    shared_tokens: r.rebuild.shared,
    queue_ms: r.queueMs,
  };
}
