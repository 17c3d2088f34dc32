import type { Effective } from '../policy/fragment.js';
import type { Resolution, SubjectFailure } from '../policy/resolve.js';
import type { Subject } from '../subjects/discovery.js';
import { PORT_RESERVED } from '../subjects/ports.js';

/**
 * What the service has in force for one UID. `failed` and `orphaned` have no policy: their chain (when they have a
 * port) redirects to a listener that refuses with `no_policy`.
 */
export interface AppliedSubject {
  account: string;
  uid: number;
  port: number | null;
  state: 'active' | 'failed' | 'orphaned';
  /** Canonical policy hash of what is applied (null unless active). */
  hash: string | null;
}

export interface AppliedState {
  mode: 'single' | 'multi';
  /** Keyed by UID: nft and fanotify match the UID, not the name. */
  subjects: Map<number, AppliedSubject>;
}

export function emptyApplied(mode: 'single' | 'multi'): AppliedState {
  return { mode, subjects: new Map() };
}

/** One subject as a reconcile pass found it: discovered, given a port (or not), resolved (or not). */
export interface Observed {
  subject: Subject;
  port: number | null;
  resolution: Resolution;
}

export type Observation =
  | { ok: true; mode: 'single' | 'multi'; subjects: Observed[]; warnings: string[] }
  /** passwd unreadable, port map corrupt, floor unreadable: "I could not look" changes nothing. */
  | { ok: false; code: string; message: string };

export type PlanFailure = SubjectFailure | { code: 'no_port' | 'apply_failed'; message: string };

export type Action =
  /** New subject (or one that had no chain): its chain, its listener, its watcher map entry. */
  | { kind: 'add'; account: string; uid: number; port: number; policy: Effective; hash: string }
  /** Policy (or port) changed: re-apply that one chain, swap its map entries. */
  | {
      kind: 'reapply';
      account: string;
      uid: number;
      port: number;
      policy: Effective;
      hash: string;
      previousHash: string | null;
    }
  /** Not touched at all. */
  | { kind: 'unchanged'; account: string; uid: number }
  /** Cannot be resolved: critical warning, chain kept or put in, its listener and every fs/exec event refuse (fail_mode). */
  | { kind: 'fail'; account: string; uid: number; port: number | null; failure: PlanFailure; hadChain: boolean }
  /** Left discovery: keep the chain, drop the policy (listener refuses, fs/exec denied). */
  | { kind: 'orphan'; account: string; uid: number; port: number | null };

export type Plan =
  | { ok: true; actions: Action[]; next: AppliedState; notes: string[] }
  | { ok: false; code: string; message: string; actions: []; next: AppliedState };

function hasChain(a: AppliedSubject | undefined): boolean {
  return a !== undefined && a.state !== 'failed';
}

/**
 * The pure planner of a reconcile: previous applied state + what was just observed -> per-subject
 * actions, and the state that holds once they are done. Only what differs is touched; a wholesale
 * failure plans nothing; the first agent on a host that started single-subject is confined like any other.
 */
export function planReconcile(prev: AppliedState, obs: Observation): Plan {
  if (!obs.ok) return { ok: false, code: obs.code, message: obs.message, actions: [], next: prev };
  const actions: Action[] = [];
  // A service grows from single to multi when its first agent account appears (the configured user moves from the
  // reserved port to its own, re-applied like any port change), and never shrinks back while it runs: the listener and
  // chain of every subject are per UID in both shapes, so nothing but the ports differs.
  const next: AppliedState = { mode: prev.mode === 'multi' ? 'multi' : obs.mode, subjects: new Map() };
  const seen = new Set<number>();
  for (const o of obs.subjects) {
    const { account, uid } = o.subject;
    seen.add(uid);
    const before = prev.subjects.get(uid);
    const port = next.mode === 'single' ? PORT_RESERVED : o.port;
    if (port === null) {
      actions.push({
        kind: 'fail',
        account,
        uid,
        port: null,
        failure: { code: 'no_port', message: `${account}: no free port in the pool` },
        hadChain: hasChain(before),
      });
      next.subjects.set(uid, { account, uid, port: null, state: 'failed', hash: null });
      continue;
    }
    if (!o.resolution.ok) {
      const already = before?.state === 'failed' && before.port === port;
      actions.push(
        already
          ? { kind: 'unchanged', account, uid }
          : { kind: 'fail', account, uid, port, failure: o.resolution.failure, hadChain: hasChain(before) },
      );
      next.subjects.set(uid, { account, uid, port, state: 'failed', hash: null });
      continue;
    }
    const { policy, hash } = o.resolution;
    next.subjects.set(uid, { account, uid, port, state: 'active', hash });
    if (!hasChain(before)) actions.push({ kind: 'add', account, uid, port, policy, hash });
    else if (before?.state === 'active' && before.hash === hash && before.port === port && before.account === account)
      actions.push({ kind: 'unchanged', account, uid });
    else actions.push({ kind: 'reapply', account, uid, port, policy, hash, previousHash: before?.hash ?? null });
  }
  for (const [uid, before] of prev.subjects) {
    if (seen.has(uid)) continue;
    next.subjects.set(uid, { ...before, state: 'orphaned', hash: null });
    actions.push(
      before.state === 'orphaned'
        ? { kind: 'unchanged', account: before.account, uid }
        : { kind: 'orphan', account: before.account, uid, port: before.port },
    );
  }
  return { ok: true, actions, next, notes: obs.warnings };
}

export type ApplyAction = Extract<Action, { kind: 'add' | 'reapply' }>;
export type FailAction = Extract<Action, { kind: 'fail' }>;
export type OrphanAction = Extract<Action, { kind: 'orphan' }>;
