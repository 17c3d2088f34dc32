import type { EntryProblemCode, Surface } from '../../engine/types.js';
import { SURFACES } from '../../engine/types.js';
import { entryProblem } from '../../engine/index.js';
import type { Effective, Fragment } from './fragment.js';
import { fold } from './fragment.js';

/**
 * An entry that can never decide anything. An inert allow is a warning (it grants nothing), except
 * an allow list under blacklist mode, which is critical like the floor's `blacklist_allow_ignored`
 * (a policy that enforces nothing must not look like one that does); an inert deny is critical:
 * it reads as a block and blocks nothing, and so is an inert ask (in a blacklist what it should ask
 * about passes unasked). The entry grammar is the engine's (entryProblem).
 */
export interface InertEntry {
  path: string;
  entry: string;
  severity: 'warning' | 'critical';
  why: string;
  /** The engine's entry problem code; null for an allow entry a blacklist never consults. */
  problem: EntryProblemCode | null;
}

/** Every inert entry of a resolved policy. */
export function inertEntries(p: Effective): InertEntry[] {
  const out: InertEntry[] = [];
  for (const s of SURFACES) {
    const sec = p[s];
    sec.allow.forEach((e, i) => {
      const problem = entryProblem(s, e);
      if (problem)
        out.push({
          path: `${s}.allow[${i}]`,
          entry: e,
          severity: 'warning',
          why: problem.message,
          problem: problem.code,
        });
      else if (sec.mode === 'blacklist')
        out.push({
          path: `${s}.allow[${i}]`,
          entry: e,
          severity: 'critical',
          why: 'blacklist mode never consults allow',
          problem: null,
        });
    });
    sec.deny.forEach((e, i) => {
      const problem = entryProblem(s, e);
      if (problem)
        out.push({
          path: `${s}.deny[${i}]`,
          entry: e,
          severity: 'critical',
          why: problem.message,
          problem: problem.code,
        });
    });
    (sec.ask ?? []).forEach((e, i) => {
      const problem = entryProblem(s, e);
      if (problem)
        out.push({
          path: `${s}.ask[${i}]`,
          entry: e,
          severity: 'critical',
          why: problem.message,
          problem: problem.code,
        });
    });
  }
  return out;
}

/** The inert entries a fragment itself writes, judged where it lands (folded over `base`). */
export function inertInFragment(f: Fragment, base: Effective): InertEntry[] {
  const folded = fold(base, f);
  return inertEntries(folded).filter((i) => {
    const [surface, list] = i.path.replace(/\[\d+\]$/, '').split('.') as [Surface, 'allow' | 'deny' | 'ask'];
    return f[surface]?.[list] !== undefined;
  });
}
