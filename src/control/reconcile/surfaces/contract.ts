/**
 * The one contract every enforced surface meets in the service: an adapter that a reconcile pass hands its
 * subjects to. agents.ts is the loop over adapters; an adapter is the only place that knows its enforcer.
 * Adding a surface (DNS, approvals) means writing one adapter, not threading hooks through the plan.
 */
import type { MetricFamily } from '../../../metrics/metrics.js';
import type { ApplyAction, FailAction, OrphanAction } from '../plan.js';

export type SurfaceName = 'filesystem' | 'network' | 'tools';

export interface SurfaceStatus {
  surface: SurfaceName;
  /** Subjects this surface currently enforces a policy for. */
  subjects: number;
  /** Their UIDs (acknowledged by the surface's own process where it has one: `leash status` reports from these). */
  uids: number[];
}

export interface SurfaceAdapter {
  readonly surface: SurfaceName;
  /**
   * Checks and compiles what `apply` will need, before any surface applies anything: a throw fails that subject
   * alone, with nothing applied for it anywhere.
   */
  prepare?(a: ApplyAction): void;
  /** Applies subjects (side by side with the other surfaces: applySideBySide); the error of each that failed here. */
  apply(actions: ApplyAction[]): Promise<Map<number, Error>>;
  /** A subject that cannot be resolved: held fail-closed on this surface. */
  deny(a: FailAction): Promise<void>;
  /** A subject that left discovery: its policy dropped, what it holds kept as the surface requires. */
  orphan(a: OrphanAction): Promise<void>;
  status(): SurfaceStatus;
  /** Reopens a decision log held by a process of the surface's own (the watcher), after a rotation. */
  reopenLogs?(): Promise<void>;
  /** Metric families a process of the surface's own counts (the watcher's), gathered at scrape time. */
  families?(): Promise<MetricFamily[]>;
  close(): Promise<void>;
}

/**
 * The bookkeeping every adapter shares: which subjects it enforces a policy for (apply adds them through `enforced`),
 * and deny/orphan that forget a subject before handing the action to the surface's own hooks.
 */
export function enforcedSet(
  surface: SurfaceName,
  hooks: { deny(a: FailAction): Promise<void>; orphan(a: OrphanAction): Promise<void> },
): { enforced: Set<number> } & Pick<SurfaceAdapter, 'deny' | 'orphan' | 'status'> {
  const enforced = new Set<number>();
  return {
    enforced,
    async deny(a) {
      enforced.delete(a.uid);
      await hooks.deny(a);
    },
    async orphan(a) {
      enforced.delete(a.uid);
      await hooks.orphan(a);
    },
    status: () => ({ surface, subjects: enforced.size, uids: [...enforced] }),
  };
}

/**
 * Every surface applies the same subjects at once (the watcher's map and the network's listener and chains are
 * independent; at 1,000 subjects one after the other added the watcher's ~40 ms to the network's ~110 ms of a
 * chain change). Every surface is let finish before anything is reported, so nothing denies a subject while a
 * surface is still applying it; then a surface that threw throws (the first in the surfaces' order), else the
 * failures of all are merged: a subject that failed on any surface is failed, and the plan denies it on every one.
 * Each surface's time is added to `ms` under its name.
 */
export async function applySideBySide(
  surfaces: readonly SurfaceAdapter[],
  actions: ApplyAction[],
  ms: Record<string, number>,
): Promise<Map<number, Error>> {
  const results = await Promise.allSettled(
    surfaces.map(async (s) => {
      const t = performance.now();
      try {
        return await s.apply(actions);
      } finally {
        ms[s.surface] = (ms[s.surface] ?? 0) + (performance.now() - t);
      }
    }),
  );
  const errors = new Map<number, Error>();
  for (const r of results) {
    if (r.status === 'rejected') throw r.reason;
    for (const [uid, e] of r.value) if (!errors.has(uid)) errors.set(uid, e);
  }
  return errors;
}
