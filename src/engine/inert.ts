/**
 * Entries that can never match, found with the same grammar the indexes are built with, so what
 * validate reports and what decide does cannot disagree.
 */
import { commandEntryProblem } from './command.js';
import { networkEntryProblem } from './network.js';
import { pathEntryProblem } from './path.js';
import { toolEntryProblem } from './tool.js';
import { SURFACES, type EntryProblem, type InertEntry, type Surface } from './types.js';

/**
 * Why `entry` can never match on `surface`, or null. The per-surface functions
 * (networkEntryProblem, pathEntryProblem, commandEntryProblem, toolEntryProblem) are the grammar;
 * this dispatches on the surface name.
 */
export function entryProblem(surface: Surface, entry: unknown): EntryProblem | null {
  switch (surface) {
    case 'network':
      return networkEntryProblem(entry);
    case 'filesystem':
      return pathEntryProblem(entry);
    case 'commands':
      return commandEntryProblem(entry);
    case 'tools':
      return toolEntryProblem(entry);
    default:
      return null;
  }
}

/**
 * Walks a whole policy, a profile fragment or a resolved config (any object with some of the
 * surface sections, each with optional `allow` / `deny` arrays) and returns every inert entry,
 * in surface, list, entry order. A section or list that is absent or not an array is skipped:
 * shape errors are the schema's to report. An inert deny entry is `critical` (it blocks nothing
 * while looking like it does), and so is an inert ask entry (in blacklist mode what it should have
 * asked about passes unasked); an inert allow entry is a `warning` (it already fails closed).
 */
export function inertEntries(policyLike: unknown): InertEntry[] {
  const out: InertEntry[] = [];
  forEachListEntry(policyLike, (surface, list, entry) => {
    const problem = entryProblem(surface, entry);
    if (problem !== null)
      out.push({ surface, list, entry, problem, severity: list === 'allow' ? 'warning' : 'critical' });
  });
  return out;
}

/**
 * Calls `fn` for every entry of every surface's `allow`, `deny` and `ask` list of a policy-like object, in surface, list,
 * entry order; an absent section or a list that is not an array is skipped (shape errors are the schema's).
 */
export function forEachListEntry(
  policyLike: unknown,
  fn: (surface: Surface, list: 'allow' | 'deny' | 'ask', entry: unknown) => void,
): void {
  if (policyLike === null || typeof policyLike !== 'object') return;
  for (const surface of SURFACES) {
    const section = (policyLike as Record<string, unknown>)[surface];
    if (section === null || typeof section !== 'object') continue;
    for (const list of ['allow', 'deny', 'ask'] as const) {
      const entries = (section as Record<string, unknown>)[list];
      if (!Array.isArray(entries)) continue;
      for (const entry of entries) fn(surface, list, entry);
    }
  }
}
