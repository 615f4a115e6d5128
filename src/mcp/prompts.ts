import type { McpHost } from "./host.js";
import { z } from "zod";
import { LONG_TEXT_MAX } from "../config/configSchema.js";
import type { ServerContext } from "./context.js";

/** prompts/*.md as MCP prompts; `task` fills their {{task}} placeholder. */
export function registerPrompts(server: McpHost, ctx: ServerContext) {
  for (const prompt of ctx.prompts.list()) {
    server.registerPrompt(
      prompt.name,
      { description: prompt.description, argsSchema: { task: z.string().max(LONG_TEXT_MAX).optional() } },
      ({ task }) => ({
        description: prompt.description,
        messages: [{ role: "user", content: { type: "text", text: ctx.prompts.render(prompt.name, { task })! } }],
      }),
    );
  }
}
