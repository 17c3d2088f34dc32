/**
 * The engine as the config, CLI and log code use it: one import point over src/engine/index.ts,
 * with no logic of its own.
 */
export { compilePolicy, decide, entryProblem, inertEntries, maskInputs } from './engine/index.js';
export type { CompiledPolicy, EntryProblem, InertEntry } from './engine/index.js';
