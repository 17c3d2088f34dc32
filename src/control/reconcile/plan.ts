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

/**
 * The mechanics a plan is carried out with (the network enforcer, the watcher map, the journal).
 * `apply`: listener, chain and map entry for the resolved policy. `deny`: chain kept or put in,
 * listener refuses (fail_mode), map entry null under fail_mode closed. `orphan`: keep the chain, drop
 * the policy (listener refuses, map entry null).
 */
export interface PlanHooks {
  apply(a: ApplyAction): Promise<void>;
  /**
   * apply for all of a plan's add/reapply actions at once (the service start: one nft transaction
   * instead of one per subject); the error of each subject that failed. Used when there are several.
   */
  applyBatch?(actions: ApplyAction[]): Promise<Map<number, Error>>;
  deny(a: FailAction): Promise<void>;
  orphan(a: OrphanAction): Promise<void>;
  /** A critical warning, said out loud (the journal). */
  critical(message: string, detail: Record<string, unknown>): void;
}

export interface Execution {
  /** What is in force now (the next pass's `prev`). */
  state: AppliedState;
  applied: string[];
  denied: string[];
  /** What this execution could not put in force, each named (a reload's caller is told these, and exits non-zero). */
  failures: { account: string; uid: number; code: string; message: string }[];
}

/**
 * Carries out a plan one subject at a time. A subject whose chain will not apply or whose listener
 * will not bind is denied alone and said out loud; every other subject's action still runs. An
 * `unchanged` subject is not touched.
 */
export async function executePlan(plan: Plan, hooks: PlanHooks): Promise<Execution> {
  const state: AppliedState = { mode: plan.next.mode, subjects: new Map(plan.next.subjects) };
  const out: Execution = { state, applied: [], denied: [], failures: [] };
  if (!plan.ok) {
    hooks.critical(`reconcile changed nothing: ${plan.message}`, { code: plan.code });
    return out;
  }
  const deny = async (a: FailAction): Promise<void> => {
    hooks.critical(`${a.account} (uid ${a.uid}) fails alone and is denied everything: ${a.failure.message}`, {
      uid: a.uid,
      code: a.failure.code,
    });
    out.denied.push(a.account);
    out.failures.push({ account: a.account, uid: a.uid, code: a.failure.code, message: a.failure.message });
    try {
      await hooks.deny(a);
    } catch (e) {
      hooks.critical(`${a.account}: denying it failed too: ${(e as Error).message}`, { uid: a.uid });
    }
  };
  const applies = plan.actions.filter((a): a is ApplyAction => a.kind === 'add' || a.kind === 'reapply');
  let batched: Map<number, Error> | null = null;
  if (hooks.applyBatch && applies.length > 1) {
    try {
      batched = await hooks.applyBatch(applies);
    } catch (e) {
      // Nothing is known of the batch: every subject is applied on its own below.
      hooks.critical(
        `applying ${applies.length} subjects at once failed, applying them one by one: ${(e as Error).message}`,
        {},
      );
      batched = null;
    }
  }
  for (const a of plan.actions) {
    switch (a.kind) {
      case 'unchanged':
        break;
      case 'add':
      case 'reapply':
        try {
          if (batched === null) await hooks.apply(a);
          else if (batched.has(a.uid)) throw batched.get(a.uid)!;
          out.applied.push(a.account);
        } catch (e) {
          await deny({
            kind: 'fail',
            account: a.account,
            uid: a.uid,
            port: a.port,
            // A failed apply may have left part of a chain: the deny hook re-renders it (fail-closed) or drops it.
            hadChain: true,
            failure: { code: 'apply_failed', message: `applying its policy failed: ${(e as Error).message}` },
          });
          state.subjects.set(a.uid, { account: a.account, uid: a.uid, port: a.port, state: 'failed', hash: null });
        }
        break;
      case 'fail':
        await deny(a);
        break;
      case 'orphan':
        try {
          await hooks.orphan(a);
        } catch (e) {
          hooks.critical(`${a.account} left discovery and dropping its policy failed: ${(e as Error).message}`, {
            uid: a.uid,
          });
          out.failures.push({ account: a.account, uid: a.uid, code: 'orphan_failed', message: (e as Error).message });
        }
        break;
    }
  }
  return out;
}
