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
/** The GGUF module is used through its entry point (reader, writer, validation behind one surface). */
const GGUF_INTERNALS = { regex: "^\\.\\.?/(.*/)?gguf/(?!index\\.js$).+", message: "use src/gguf through src/gguf/index.ts" };
/** The local engine implements the interface: from src/ it may use only the interface, the gguf module and the lock. */
const SRC_FROM_NATIVE = { regex: "^\\.\\./(\\.\\./)*src/(?!(engine|gguf)/index\\.js$|mutex\\.js$).+", message: "native/ uses from src/ only src/engine (the interface it implements), src/gguf and src/mutex.ts" };
/** The remote engine implements the interface like native/ does: no node-llama-cpp, no native/, nothing of the layers above it. */
const ABOVE_REMOTE = {
  regex: "^(\\.\\./)+(native|sessions|harness|server|transports|runtime|config|cli|tools|openai|status|demo|export|budgets|prompts)/",
  message: "src/engines uses src/engine (the interface it implements), src/gguf, src/library/peft and src/mutex.ts; the base model's tokenizer comes in as a ChatCodec from the composition root",
};
const CLI = { regex: "^\\.\\.?/(.*/)?cli/", message: "nothing imports src/cli: it is the program's entry, composing everything else" };
const HARNESS = { regex: "^\\.\\.?/(.*/)?harness/", message: "src/sessions does not know the harness that drives it" };
const COMPOSITION = { regex: "^\\.\\.?/(.*/)?(runtime|config)/", message: "src/sessions states what it needs (SessionHost, SessionsConfig); the config and the runtime that composes it sit above" };
const SERVER = { regex: "^\\.\\.?/(.*/)?server/", message: "the MCP surface sits above sessions and harness; they never import it" };

const restrict = (...patterns) => ({ "@typescript-eslint/no-restricted-imports": ["error", { patterns }] });

/** The one test that checks the private members native/llama/internals.ts relies on exist reads node-llama-cpp itself. */
const LLAMA_CPP_EXCEPTIONS = ["test/engine.test.ts"];

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
  { files: ["**/*.ts"], rules: restrict(LLAMA_CPP, CLI, GGUF_INTERNALS) },
  { files: ["src/**/*.ts", "bench/**/*.ts"], rules: restrict(LLAMA_CPP, CLI, GGUF_INTERNALS, NATIVE_INTERNALS) },
  { files: ["test/**/*.ts"], rules: restrict(LLAMA_CPP, CLI, GGUF_INTERNALS, NATIVE_INTERNALS_FOR_TESTS) },
  { files: ["src/sessions/**/*.ts"], rules: restrict(LLAMA_CPP, CLI, GGUF_INTERNALS, NATIVE_INTERNALS, HARNESS, SERVER, COMPOSITION) },
  { files: ["src/harness/**/*.ts"], rules: restrict(LLAMA_CPP, CLI, GGUF_INTERNALS, NATIVE_INTERNALS, SERVER) },
  { files: ["src/cli/**/*.ts"], rules: restrict(LLAMA_CPP, GGUF_INTERNALS, NATIVE_INTERNALS) },
  { files: ["src/engines/**/*.ts"], rules: restrict(LLAMA_CPP, CLI, GGUF_INTERNALS, ABOVE_REMOTE) },
  // inside src/gguf its own files import each other freely
  { files: ["src/gguf/**/*.ts"], rules: restrict(LLAMA_CPP, CLI) },
  { files: ["native/**/*.ts"], rules: restrict(LLAMA_CPP, CLI, GGUF_INTERNALS, SRC_FROM_NATIVE) },
  { files: ["native/llama/**/*.ts"], rules: restrict(CLI, GGUF_INTERNALS, SRC_FROM_NATIVE) },
  { files: LLAMA_CPP_EXCEPTIONS, rules: restrict(CLI, GGUF_INTERNALS, NATIVE_INTERNALS_FOR_TESTS) },
);
