import { ensureDemoWeights } from "../src/demo/ensure.js";

/** The suites run on the generated demo model; a fresh clone has none until this writes it. */
export default function setup() {
  ensureDemoWeights();
}
