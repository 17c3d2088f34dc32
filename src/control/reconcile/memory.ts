import { releaseMemory } from '../../dataplane/network/proxy/settle.js';
import type { Plan } from './plan.js';

/**
 * Applying many subjects at once (a start, a pass adding a fleet's accounts) parses and compiles every policy: the
 * heap and glibc's arenas grow for it and keep the pages. One memory-reducing collection and malloc_trim afterwards
 * (settle.ts) bring RSS back to what the subjects hold, off the pass's own time.
 */
export function releaseAfter(plan: Plan): void {
  const heavy = plan.actions.filter((a) => a.kind === 'add' || a.kind === 'reapply').length;
  if (heavy >= 64)
    setImmediate(() => {
      try {
        releaseMemory();
      } catch {
        // no addon (a build without it): memory stays where the collector leaves it
      }
    });
}
