/**
 * The Leash policy engine: pure functions, no I/O. Enforcers call `decide` with a policy
 * compiled once by `compilePolicy`; the config layer uses the entry grammar and `inertEntries`.
 */
export * from './types.js';
export {
  compilePolicy,
  decide,
  decideDnsName,
  decideDnsAnswer,
  decideNoPolicy,
  effectiveFailMode,
  logAction,
  shadowed,
} from './decide.js';
export type { CompiledPolicy, DecideOptions } from './decide.js';
export { networkEntryProblem, parseNetworkEntry, ptrAddress } from './network.js';
export type { NetworkEntry } from './network.js';
export { normalizeDomainSubject } from './domain.js';
export { parseIp } from './ip.js';
export { parsePort } from './port.js';
export { pathEntryProblem, normalizePath, isGlob, parseGlob, matchGlob } from './path.js';
export type { GlobToken } from './path.js';
export { commandEntryMatches, commandEntryProblem } from './command.js';
export { toolEntryProblem, normalizeToolName } from './tool.js';
export { entryProblem, forEachListEntry, inertEntries } from './inert.js';
export {
  inspectInputs,
  maskSecrets,
  maskInputs,
  maskValue,
  maskSecretsOnly,
  redactSecrets,
  mayHoldSecret,
  SECRET_LITERALS,
  DETECTOR_NEEDS,
  inspectionNeeds,
  maskingNeeds,
  meetsNeed,
} from './inspect.js';
export type { DetectorNeed } from './inspect.js';
export { findSecrets, SECRET_KINDS } from './secrets.js';
export type { SecretSpan } from './secrets.js';
