/** PEFT (Hugging Face) LoRA folders -> GGUF LoRA adapters for the configured base model. */
export {
  importPeft,
  PEFT_CONFIG_FILE,
  PEFT_WEIGHTS_FILE,
  type ImportPeftOptions,
  type ImportPeftResult,
} from "./importPeft.js";
export { PeftImportError } from "./errors.js";
export {
  PeftConfigSchema,
  parsePeftConfig,
  readPeftConfig,
  peftScaling,
  ggufAlpha,
  type PeftConfig,
} from "./peftConfig.js";
export {
  mapPeftTensorName,
  ggufToPeftName,
  permuteRowsForRope,
  MODULE_TO_GGUF,
  PEFT_ARCHITECTURES,
} from "./mapping.js";
export { exportPeft, scaledPeftCopy, type ExportPeftOptions, type ExportPeftResult } from "./exportPeft.js";
export {
  SafetensorsFile,
  writeSafetensors,
  SAFETENSORS_DTYPE_SIZE,
  type SafetensorsHeader,
  type SafetensorsTensor,
  type SafetensorsTensorSource,
} from "./safetensors.js";
export { f32ToF16, f16ToF32, f32ToBf16, bf16ToF32 } from "../../gguf/index.js";
export { readGgufTensorData } from "./ggufData.js";
export { peftFolderSha256 } from "./peftFolder.js";
