// ESLint: the recommended sets, and the seams between the layers as import rules (docs/ARCHITECTURE.md).
// Layers point one way: transports -> MCP surface -> harness -> sessions -> engine interface <- engines.
import js from "@eslint/js";
import { defineConfig } from "eslint/config";
import globals from "globals";
import tseslint from "typescript-eslint";

/** node-llama-cpp is the engine's business: only native/llama/ calls it. */
const LLAMA_CPP = { regex: "^node-llama-cpp(/.*)?$", message: "node-llama-cpp is imported only inside native/llama/ (the engine seam); go through native/index.ts" };
/** Code outside native/ reaches the engine through its entry point only. */
const NATIVE_INTERNALS = { regex: "^\\.\\.?/(.*/)?native/(?!index\\.js$).+", message: "reach native/ through native/index.ts, its public surface" };
/** Tests may also use the test-only surface (the replayed reference, planted bugs). */
const NATIVE_INTERNALS_FOR_TESTS = { regex: "^\\.\\.?/(.*/)?native/(?!(index|testing)\\.js$).+", message: "tests reach native/ through native/index.ts or native/testing.ts" };
const CLI = { regex: "^\\.\\.?/(.*/)?cli/", message: "nothing imports src/cli: it is the program's entry, composing everything else" };
const HARNESS = { regex: "^\\.\\.?/(.*/)?harness/", message: "src/sessions does not know the harness that drives it" };
const COMPOSITION = { regex: "^\\.\\.?/(.*/)?(runtime|config)/", message: "src/sessions states what it needs (SessionHost, SessionsConfig); the config and the runtime that composes it sit above" };
const SERVER = { regex: "^\\.\\.?/(.*/)?server/", message: "the MCP surface sits above sessions and harness; they never import it" };

const restrict = (...patterns) => ({ "@typescript-eslint/no-restricted-imports": ["error", { patterns }] });

/**
 * native/ files that import node-llama-cpp values outside native/llama/ today. Each is an exception until its import
 * moves behind native/llama/ (issue 15's engine half): type-only imports are allowed anywhere in native/, they
 * describe the objects native passes between its own modules and load nothing.
 */
const LLAMA_CPP_EXCEPTIONS = [
  "native/engine/Engine.ts", // resolveChatWrapper
  "native/chat/render.ts", // LlamaText, chat wrappers
  "native/chat/bias.ts", // TokenBias
  "native/chat/functionCalls.ts", // JinjaTemplateChatWrapper
  "native/session/EngineSession.ts", // LlamaChat, LlamaText, TokenBias
  "native/reference/PlainReference.ts", // its own llama.cpp runtime, independent of the engine on purpose
  "test/engine.test.ts", // checks that the private members native/llama/internals.ts relies on exist
];

export default defineConfig(
  { ignores: ["dist/", "node_modules/", ".stryker-tmp/", "reports/", "models/", "adapters/", ".weact/"] },
  js.configs.recommended,
  tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node } },
    rules: {
      // `_name` marks a value left out on purpose (destructuring that drops a field, an unused parameter)
      // a `let` read by a closure before its one assignment cannot be a const
      "prefer-const": ["error", { ignoreReadBeforeAssign: true }],
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_", destructuredArrayIgnorePattern: "^_", caughtErrors: "none" }],
    },
  },
  { files: ["src/status/assets/**/*.js"], languageOptions: { globals: { ...globals.browser } } },
  // the seams, from the most general to the most particular: a later block replaces an earlier one's patterns
  { files: ["**/*.ts"], rules: restrict(LLAMA_CPP, CLI) },
  { files: ["src/**/*.ts", "bench/**/*.ts"], rules: restrict(LLAMA_CPP, CLI, NATIVE_INTERNALS) },
  { files: ["test/**/*.ts"], rules: restrict(LLAMA_CPP, CLI, NATIVE_INTERNALS_FOR_TESTS) },
  { files: ["src/sessions/**/*.ts"], rules: restrict(LLAMA_CPP, CLI, NATIVE_INTERNALS, HARNESS, SERVER, COMPOSITION) },
  { files: ["src/harness/**/*.ts"], rules: restrict(LLAMA_CPP, CLI, NATIVE_INTERNALS, SERVER) },
  { files: ["src/cli/**/*.ts"], rules: restrict(LLAMA_CPP, NATIVE_INTERNALS) },
  {
    files: ["native/**/*.ts"],
    rules: { "@typescript-eslint/no-restricted-imports": ["error", { patterns: [{ ...LLAMA_CPP, allowTypeImports: true }, CLI] }] },
  },
  { files: ["native/llama/**/*.ts", ...LLAMA_CPP_EXCEPTIONS.filter((f) => f.startsWith("native/"))], rules: restrict(CLI) },
  { files: LLAMA_CPP_EXCEPTIONS.filter((f) => f.startsWith("test/")), rules: restrict(CLI, NATIVE_INTERNALS_FOR_TESTS) },
);
