export {
  detectIsolation,
  hidingPaths,
  IsolationUnavailableError,
  type DetectIsolationOptions,
  type Enforcement,
  type IsolationInfo,
  type IsolationLevel,
  type Jail,
} from "./isolation.js";
export {
  DEFAULT_RUN_CODE_LIMITS,
  runCode,
  RunCodeRequestError,
  RunCodeSpawnError,
  RunCodeUnavailableError,
  type Language,
  type RunCodeLimits,
  type RunCodeOptions,
  type RunCodeRequest,
  type RunCodeResult,
} from "./runCode.js";
