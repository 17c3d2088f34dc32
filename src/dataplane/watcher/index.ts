// The filesystem + commands enforcer as the service sees it: the supervisor (a UID -> compiled policy map the
// watcher acknowledges) and the compile of a subject's filesystem and commands policy into what the map holds.

export { createFsSupervisor, mapSurface, type FsSupervisor, type FsSupervisorOptions } from './supervisor.js';
export { fsCmdPolicyOf, markCoverage, parseMountinfo, policyRoots, type CoverageWarning } from './policy.js';
