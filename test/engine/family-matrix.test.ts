import { FAMILIES } from "../../src/demo/families.js";
import { describeFamilyMatrix } from "../helpers/matrix.js";

// The matrix's rows are every family whose chat wrapper parses function calls (the others are refused at start-up,
// which test/engine/families.test.ts checks); a row per family, a cell per quant type.
for (const family of FAMILIES.filter((f) => f.functionCalls)) describeFamilyMatrix(family.name);
