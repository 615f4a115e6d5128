// ESLint: the recommended sets, and the seams between the layers as import rules (docs/ARCHITECTURE.md).
// Layers point one way: transports -> MCP surface -> harness -> sessions -> engine interface <- engines.
import js from "@eslint/js";
import { defineConfig } from "eslint/config";
import globals from "globals";
import tseslint from "typescript-eslint";

/**
 * node-llama-cpp is llama.cpp in this process: the local engine serves with it (src/engines/local/), and
 * src/llamaCpp/ starts it, loads a model and renders with its chat wrappers for whoever else needs that (the
 * engine, the reference, the remote engine's chat codec). Three single files outside them use one public piece each:
 * src/modelProbe/callSyntax.ts (a chat wrapper's call syntax), src/modelFiles/sources/hfDownload.ts (the downloader)
 * and bench/llamaSpeed.ts (llama.cpp's raw speed).
 */
const LLAMA_CPP = {
  regex: "^node-llama-cpp(/.*)?$",
  message:
    "node-llama-cpp is imported only in src/engines/local/ (serving) and src/llamaCpp/ (starting llama.cpp, loading a model, rendering, the chat codec); use what src/llamaCpp/ exports",
};
/** Code outside the local engine reaches it through its entry point only. */
const LOCAL_ENGINE_INTERNALS = {
  regex: "^\\.\\.?/(.*/)?engines/local/(?!index\\.js$).+",
  message: "reach the local engine through src/engines/local/index.ts, its public surface",
};
/** The remote engine likewise: src/ reaches it through its entry point (its testing.ts is for tests alone). */
const REMOTE_ENGINE_INTERNALS = {
  regex: "^\\.\\.?/(.*/)?engines/remote/(?!index\\.js$).+",
  message: "reach the remote engine through src/engines/remote/index.ts, its public surface",
};
/** Tests may also use the test-only surface (the replayed reference, planted bugs). */
const LOCAL_ENGINE_INTERNALS_FOR_TESTS = {
  regex: "^\\.\\.?/(.*/)?engines/local/(?!(index|localTesting)\\.js$).+",
  message: "tests reach the local engine through src/engines/local/index.ts or src/engines/local/localTesting.ts",
};
/** The GGUF module is used through its entry point (reader, writer, validation behind one surface). */
const GGUF_INTERNALS = {
  regex: "^\\.\\.?/(.*/)?gguf/(?!index\\.js$).+",
  message: "use src/gguf through src/gguf/index.ts",
};
/** What an engine may use of src/ besides the interface: nothing of the layers above it. */
const ABOVE_ENGINES =
  "budgets|cli|composition|config|demo|export|externalTools|harness|http|mcp|modelFiles|openai|prompts|sessions|status|transports";
/** The local engine implements the interface: from src/ it may use only the interface, the gguf module and the lock. */
const LOCAL_ENGINE_OUTWARD = {
  regex: `^(\\.\\./)+((${ABOVE_ENGINES}|library|remote)/|engine/(?!index\\.js$)|(log|paths|portableSchema)\\.js$)`,
  message:
    "src/engines/local uses from src/ only src/engine (the interface it implements, through its index.ts), src/llamaCpp, src/modelProbe, src/gguf and src/mutex.ts",
};
/**
 * The remote engine implements the interface like the local one does: no node-llama-cpp, no local engine, nothing of
 * the layers above.
 */
const REMOTE_ENGINE_OUTWARD = {
  regex: `^(\\.\\./)+((${ABOVE_ENGINES}|local)/)`,
  message:
    "src/engines/remote uses src/engine (the interface it implements), src/gguf, src/library/peft and src/mutex.ts; the base model's tokenizer comes in as a ChatCodec from the composition root",
};
/** llama.cpp in this process sits below the engines: it knows nothing of them, nor of the layers above. */
const LLAMA_CPP_OUTWARD = {
  regex: `^(\\.\\./)+((${ABOVE_ENGINES}|library|engines)/|engine/(?!index\\.js$))`,
  message:
    "src/llamaCpp and src/modelProbe sit below the engines: they use src/engine (through its index.ts), src/gguf and each other, never an engine or a layer above",
};
const CLI = {
  regex: "^\\.\\.?/(.*/)?cli/",
  message: "nothing imports src/cli: it is the program's entry, composing everything else",
};
const APP = {
  regex: "^\\.\\.?/(.*/)?composition/",
  message:
    "src/composition is the composition root (runtime, services, the HTTP app); only the entry points import it: src/cli, training/, bench/, test/",
};
/** What the server ships never depends on training code, test tooling or benchmarks. */
const NOT_SHIPPED = {
  regex: "^(\\.\\./)+(training|testkit|bench|test)/",
  message: "src/ is what npm start ships: training/, testkit/, bench/ and test/ use it, never the other way",
};
const HARNESS = { regex: "^\\.\\.?/(.*/)?harness/", message: "src/sessions does not know the harness that drives it" };
const COMPOSITION = {
  regex: "^\\.\\.?/(.*/)?(composition|config)/",
  message:
    "src/sessions states what it needs (SessionRuntime, SessionsConfig); the config and the composition root sit above",
};
const MCP = {
  regex: "^\\.\\.?/(.*/)?mcp/",
  message: "the MCP surface sits above sessions and harness; they never import it",
};
const ENGINES = {
  regex: "^\\.\\.?/(.*/)?engines/",
  message:
    "src/config owns the names it validates; it does not reach into an engine (the composition root in src/composition does)",
};

const restrict = (...patterns) => ({ "@typescript-eslint/no-restricted-imports": ["error", { patterns }] });

/**
 * The one test that checks the private members src/engines/local/decoding/internals.ts relies on exist reads
 * node-llama-cpp itself.
 */
const LLAMA_CPP_EXCEPTIONS = ["test/engine/engine.test.ts"];

const SRC = [LLAMA_CPP, CLI, APP, GGUF_INTERNALS, LOCAL_ENGINE_INTERNALS, REMOTE_ENGINE_INTERNALS, NOT_SHIPPED];

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
      "@typescript-eslint/no-unused-vars": [
        "error",
        {
          argsIgnorePattern: "^_",
          varsIgnorePattern: "^_",
          destructuredArrayIgnorePattern: "^_",
          caughtErrors: "none",
        },
      ],
    },
  },
  { files: ["src/status/assets/**/*.js"], languageOptions: { globals: { ...globals.browser } } },
  // the seams, from the most general to the most particular: a later block replaces an earlier one's patterns
  { files: ["**/*.ts"], rules: restrict(LLAMA_CPP, CLI, GGUF_INTERNALS) },
  {
    files: ["bench/**/*.ts", "testkit/**/*.ts", "training/**/*.ts"],
    rules: restrict(LLAMA_CPP, CLI, GGUF_INTERNALS, LOCAL_ENGINE_INTERNALS),
  },
  { files: ["src/**/*.ts"], rules: restrict(...SRC) },
  { files: ["test/**/*.ts"], rules: restrict(LLAMA_CPP, CLI, GGUF_INTERNALS, LOCAL_ENGINE_INTERNALS_FOR_TESTS) },
  { files: ["src/sessions/**/*.ts"], rules: restrict(...SRC, HARNESS, MCP, COMPOSITION) },
  { files: ["src/harness/**/*.ts"], rules: restrict(...SRC, MCP) },
  { files: ["src/config/**/*.ts"], rules: restrict(...SRC, ENGINES) },
  {
    files: ["src/cli/**/*.ts"],
    rules: restrict(LLAMA_CPP, GGUF_INTERNALS, LOCAL_ENGINE_INTERNALS, REMOTE_ENGINE_INTERNALS, NOT_SHIPPED),
  },
  { files: ["src/engines/remote/**/*.ts"], rules: restrict(...SRC, REMOTE_ENGINE_OUTWARD) },
  // inside src/gguf its own files import each other freely
  { files: ["src/gguf/**/*.ts"], rules: restrict(LLAMA_CPP, CLI, NOT_SHIPPED) },
  {
    files: ["src/engines/local/**/*.ts"],
    rules: restrict(CLI, GGUF_INTERNALS, NOT_SHIPPED, LOCAL_ENGINE_OUTWARD),
  },
  { files: ["src/llamaCpp/**/*.ts"], rules: restrict(CLI, GGUF_INTERNALS, NOT_SHIPPED, LLAMA_CPP_OUTWARD) },
  {
    files: ["src/modelProbe/**/*.ts"],
    rules: restrict(LLAMA_CPP, CLI, GGUF_INTERNALS, NOT_SHIPPED, LLAMA_CPP_OUTWARD),
  },
  { files: ["src/modelProbe/callSyntax.ts"], rules: restrict(CLI, GGUF_INTERNALS, NOT_SHIPPED, LLAMA_CPP_OUTWARD) },
  { files: ["src/modelFiles/sources/hfDownload.ts"], rules: restrict(...SRC.filter((p) => p !== LLAMA_CPP)) },
  { files: ["bench/llamaSpeed.ts"], rules: restrict(CLI, GGUF_INTERNALS, LOCAL_ENGINE_INTERNALS) },
  { files: LLAMA_CPP_EXCEPTIONS, rules: restrict(CLI, GGUF_INTERNALS, LOCAL_ENGINE_INTERNALS_FOR_TESTS) },
);
