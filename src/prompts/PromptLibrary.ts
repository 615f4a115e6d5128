import { readdirSync, readFileSync } from "node:fs";
import { basename, join } from "node:path";

export interface PromptTemplate {
  name: string;
  description: string;
  text: string;
}

const DESCRIPTION = /^<!--\s*description:\s*(.*?)\s*-->\s*\n?/;

/** The system and stage prompts of prompts/*.md: served as MCP prompts and used as session defaults. */
export class PromptLibrary {
  private constructor(private readonly prompts: Map<string, PromptTemplate>) {}

  static load(dir: string): PromptLibrary {
    const prompts = new Map<string, PromptTemplate>();
    for (const file of readdirSync(dir)
      .filter((f) => f.endsWith(".md"))
      .sort()) {
      const raw = readFileSync(join(dir, file), "utf8");
      const m = DESCRIPTION.exec(raw);
      const name = basename(file, ".md");
      prompts.set(name, { name, description: m?.[1] ?? name, text: (m ? raw.slice(m[0].length) : raw).trim() });
    }
    return new PromptLibrary(prompts);
  }

  list(): PromptTemplate[] {
    return [...this.prompts.values()];
  }

  /** The prompt with `{{name}}` placeholders filled; unknown placeholders are left as they are. */
  render(name: string, values: Record<string, string | undefined> = {}): string | undefined {
    const prompt = this.prompts.get(name);
    return prompt?.text.replace(/\{\{(\w+)\}\}/g, (whole, key: string) => values[key] ?? whole);
  }
}
