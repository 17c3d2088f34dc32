import { approvalFamilies, type Approvals } from '../approvals/service.js';
import type { MetricFamily } from '../../metrics/metrics.js';
import type { AppliedState } from './plan.js';
import type { Driven } from './execute.js';

/** Scrape-time figures: subjects by state, the approvals queue's counts, and what each surface's own process counts. */
export async function collectSubjects(
  applied: AppliedState,
  approvals: Approvals,
  surfaces: readonly Driven[],
): Promise<MetricFamily[]> {
  const byState: Record<string, number> = { active: 0, failed: 0, orphaned: 0 };
  for (const sub of applied.subjects.values()) byState[sub.state] = (byState[sub.state] ?? 0) + 1;
  const out: MetricFamily[] = [
    {
      name: 'leash_subjects',
      help: 'subjects by state: active (policy enforced), failed (held fail-closed), orphaned',
      type: 'gauge',
      values: Object.entries(byState).map(([state, value]) => ({ value, labels: { state } })),
    },
  ];
  out.push(...approvalFamilies(approvals.queue.counts()));
  for (const s of surfaces) if (s.families) out.push(...(await s.families()));
  return out;
}
