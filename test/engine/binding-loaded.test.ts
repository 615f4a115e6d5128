import { describe, expect, it } from "vitest";
import type { EngineLogger } from "../../src/engine/index.js";
import { LocalEngine } from "../../src/engines/local/index.js";
import { demo, TEST_BINDING, TEST_THREADS } from "../helpers/engine.js";

/**
 * The engine suites run on the binding they asked for: the prebuilt one in `npm test`, the source build under
 * `npm run check:binding` (WEACT_TEST_BINDING=source), which must not quietly test the prebuilt one.
 */
describe("the suite's binding", () => {
  it(`loads the ${TEST_BINDING} binding and logs which one it loaded`, async () => {
    const ready: object[] = [];
    const noop = () => {};
    const logger: EngineLogger = {
      debug: noop,
      warn: noop,
      error: noop,
      info: (obj, msg) => void (msg === "llama.cpp runtime ready" && ready.push(obj)),
    };
    const engine = await LocalEngine.load({
      modelPath: demo.model,
      gpu: false,
      threads: TEST_THREADS,
      binding: TEST_BINDING,
      logger,
    });
    await engine.dispose();
    expect(ready).toHaveLength(1);
    if (TEST_BINDING !== "auto") expect(ready[0]).toMatchObject({ binding: TEST_BINDING });
  });
});
