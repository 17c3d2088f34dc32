/**
 * The one contract every enforced surface meets in the service: a plane's side of a reconcile, handed the subjects
 * of a plan by execute.ts. A surface is the only place that knows its data plane (the network enforcer, the
 * watcher's supervisor, the tools socket) and turns a resolved policy into what that plane takes. Adding a surface
 * (DNS, approvals) means writing one, not threading hooks through the plan.
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

export interface Surface {
  readonly surface: SurfaceName;
  /**
   * Checks and compiles what `apply` will need, before any surface applies anything: a throw fails that subject
   * alone, with nothing applied for it anywhere.
   */
  prepare?(a: ApplyAction): void;
  /** Applies subjects (side by side with the other surfaces: execute.ts applySideBySide); the error of each that failed here. */
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
): { enforced: Set<number> } & Pick<Surface, 'deny' | 'orphan' | 'status'> {
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
