import { join } from "node:path";
import type { TrainingRun } from "../pipeline/run.js";

/** The PEFT folders the train step writes, and the base config.json convert_lora_to_gguf.py reads. */
export const peftDir = (run: TrainingRun, capability: string) => join(run.work, "peft", capability);
export const baseConfigDir = (run: TrainingRun) => join(run.work, "peft", "base");
/** The train step's record: each capability's result line from train_lora.py, and the step's seconds. */
export const trainerRecord = (run: TrainingRun) => join(run.work, "peft", "results.json");
