/**
 * The one contract between the control plane's reconcile and each plane that enforces (the network enforcer, the
 * watcher's supervisor, the tools gate's socket): the control plane pushes compiled per-subject policies down and
 * the floor's fail_mode with them; a plane never calls or reads anything of the control plane while applying them.
 * `S` is what the plane takes for one subject, compiled by the control plane (src/control/reconcile/execute.ts).
 */
export type SurfaceName = 'filesystem' | 'network' | 'tools';

export type FailMode = 'closed' | 'open';

export interface SurfaceStatus {
  surface: SurfaceName;
  /** Subjects this surface currently enforces a policy for. */
  subjects: number;
  /** Their UIDs (acknowledged by the surface's own process where it has one: `leash status` reports from these). */
  uids: number[];
}

/** A subject withdrawn from a plane: one that cannot be resolved (deny) or that left discovery (orphan). */
export interface Withdrawn {
  uid: number;
  /** Its port, or none (the pool is exhausted). */
  port: number | null;
}

export interface Surface<S extends { uid: number } = { uid: number }> {
  readonly surface: SurfaceName;
  /** Applies subjects (side by side with the other surfaces); the error of each that failed here. */
  apply(subjects: S[]): Promise<Map<number, Error>>;
  /** A subject that cannot be resolved: held fail-closed on this surface. */
  deny(w: Withdrawn): Promise<void>;
  /** A subject that left discovery: its policy dropped, what it holds kept as the surface requires. */
  orphan(w: Withdrawn): Promise<void>;
  /** The floor's fail_mode, pushed before each pass: what a subject without a policy is answered under from now on. */
  setFailMode?(m: FailMode): void;
  /** What this surface enforces now. */
  enforcing(): SurfaceStatus;
  /** Reopens a decision log held by a process of the surface's own (the watcher), after a rotation. */
  reopenLog?(): Promise<void>;
  close(): Promise<void>;
}
