import { describeFamilyMatrix } from "./helpers/matrix.js";

// one file per family: vitest runs the rows in parallel processes
describeFamilyMatrix("llama");
