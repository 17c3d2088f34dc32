// The filesystem + commands enforcer as the service sees it: the supervisor, and the
// mapping from a reconcile plan's actions to watcher map entries.
import type { FsSupervisor } from './supervisor.js';
import { fsCmdPolicyOf } from './policy.js';

export { createFsSupervisor, type FsSupervisor, type FsSupervisorOptions } from './supervisor.js';
export { fsCmdPolicyOf, markCoverage, parseMountinfo, policyRoots, type CoverageWarning } from './policy.js';

/**
 * What a reconcile does to the watcher map, one subject at a time (see service/plan.ts
 * PlanHooks): `apply` sets the resolved policy; `deny` (a subject that cannot be resolved)
 * and `orphan` (a subject that left discovery) set "no policy", which the watcher denies
 * under fail_mode closed — never removes the UID, since an absent UID is an allowed UID.
 * Each call resolves once the watcher has acknowledged the change.
 */
export function watcherMapHooks(
  sup: FsSupervisor,
  opts: { failMode: 'closed' | 'open' },
): {
  apply(a: { uid: number; policy: Parameters<typeof fsCmdPolicyOf>[0] }): Promise<void>;
  deny(a: { uid: number }): Promise<void>;
  orphan(a: { uid: number }): Promise<void>;
} {
  return {
    apply: (a) => sup.set(a.uid, fsCmdPolicyOf(a.policy), a.policy.fail_mode),
    deny: (a) => sup.set(a.uid, null, opts.failMode),
    orphan: (a) => sup.set(a.uid, null, opts.failMode),
  };
}
