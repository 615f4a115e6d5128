/**
 * llama.cpp's raw speed with one node-llama-cpp binding, in a process of its own (a process loads one binding); prints
 * its figures as one JSON line.
 * node dist/bench/bindingSpeed.js prebuilt|source MODEL THREADS
 */
import type { BindingSetting } from "../src/llamaCpp/binding.js";
import { measureLlamaSpeed } from "./llamaSpeed.js";

const [binding, modelPath, threads] = process.argv.slice(2) as [BindingSetting, string, string];
const figures = await measureLlamaSpeed({ modelPath, binding, threads: Number(threads) });
process.stdout.write(JSON.stringify(figures) + "\n");
