/**
 * The execute step of a reconcile pass: a plan carried out over the data planes' surfaces (src/dataplane/contract.ts),
 * side by side. A subject is compiled for every surface first (what does not compile fails it alone, with nothing
 * applied), then applied by all at once; a subject that failed anywhere is denied everywhere, in the withdraw order.
 */
import type { Surface, SurfaceName } from '../../dataplane/contract.js';
import type { NetworkSubjectSpec } from '../../dataplane/network/enforcer.js';
import type { FsCmdPolicy, WatcherSubject } from '../../dataplane/watcher/addon.js';
import { fsCmdPolicyOf } from '../../dataplane/watcher/policy.js';
import { compilePolicy, type CompiledPolicy } from '../../engine/index.js';
import type { MetricFamily } from '../../metrics/metrics.js';
import { toPolicyInput } from '../config/policy-input.js';
import type { Effective } from '../policy/fragment.js';
import { effectiveEch } from '../policy/loosen.js';
import type { ApplyAction, FailAction, OrphanAction, Plan, AppliedState } from './plan.js';

/**
 * A plane's surface as a pass drives it: the plane (the one contract) and how a subject's resolved policy becomes
 * what that plane takes, compiled here in the control plane.
 */
export interface Driven<S extends { uid: number } = { uid: number }> {
  plane: Surface<S>;
  /**
   * What the plane takes for a subject, before any surface applies anything: a throw fails that subject alone, with
   * nothing applied for it anywhere. `memo` lives for one batch (subjects with equal policies share a compile).
   */
  compile(a: ApplyAction, memo: Map<string, unknown>): S;
  /** Metric families a process of the surface's own counts (the watcher's), gathered at scrape time. */
  families?(): Promise<MetricFamily[]>;
}

/** A plane and its compile, typed together (a Driven's S is the plane's own). */
export function drive<S extends { uid: number }>(
  plane: Surface<S>,
  compile: Driven<S>['compile'],
  families?: Driven<S>['families'],
): Driven {
  return { plane, compile, ...(families ? { families } : {}) };
}

/** What the network enforcer takes for one subject: its listener's compiled policy and its chain's settings. */
export function networkSubjectOf(a: ApplyAction, memo: Map<string, unknown>): NetworkSubjectSpec<CompiledPolicy> {
  const n = a.policy.network;
  // Subjects whose resolved policies are equal (the hash of the canonical policy: agents bound to one profile)
  // share one compiled policy, which the engine only reads.
  const key = `network:${a.hash}`;
  let policy = memo.get(key) as CompiledPolicy | undefined;
  if (!policy) memo.set(key, (policy = compilePolicy(toPolicyInput(a.policy))));
  return {
    uid: a.uid,
    port: a.port,
    policy,
    udp: n.udp,
    ech: effectiveEch(n),
    ...(n.dns_resolvers.length ? { resolvers: n.dns_resolvers } : {}),
  };
}

/**
 * One resolved policy, one watcher map policy (the same object each time): the supervisor then knows the start's
 * own map when the first pass hands it the very same policies again.
 */
const fsCmdCompiled = new WeakMap<Effective, FsCmdPolicy>();

/** What the watcher's map takes for one subject. */
export function watcherSubjectOf(a: { uid: number; policy: Effective }): WatcherSubject {
  let policy = fsCmdCompiled.get(a.policy);
  if (!policy) fsCmdCompiled.set(a.policy, (policy = fsCmdPolicyOf(a.policy)));
  return { uid: a.uid, policy, failMode: a.policy.fail_mode };
}

/**
 * What the service is told as a plan is carried out: each is this step's own event (a subject about to be applied,
 * applied, about to be withdrawn), never a part of its work handed back up.
 */
export interface ExecuteEvents {
  /** A critical warning, said out loud (the journal). */
  critical(message: string, detail: Record<string, unknown>): void;
  /** A subject about to be applied (the service says where its enforcers differ from the ones running). */
  applying?(a: ApplyAction): void;
  /** Subjects the surfaces took or refused (a policy changed: its session approvals end). */
  applied?(actions: ApplyAction[]): void;
  /** A subject about to be denied or orphaned (its pending approvals go). */
  withdrawing?(uid: number): void;
  /** Time each surface spent applying (ms), added to under its name. */
  ms?: Record<string, number>;
}

/** A withdrawn subject loses its gate policy first, then its map entry, then its chain. */
const WITHDRAW_ORDER: SurfaceName[] = ['tools', 'filesystem', 'network'];

function inOrder(surfaces: readonly Driven[], names: SurfaceName[]): Driven[] {
  return names.flatMap((n) => surfaces.filter((s) => s.plane.surface === n));
}

/**
 * Applies subjects: every surface's compile of each subject first (a policy that does not compile fails it alone,
 * with nothing applied), then the surfaces apply those still standing side by side: the watcher map entries (each
 * acknowledged), every listener and one nft transaction for all chains, the gate. The error of each that failed.
 */
async function applyAll(
  surfaces: readonly Driven[],
  actions: ApplyAction[],
  ev: ExecuteEvents,
): Promise<Map<number, Error>> {
  const errors = new Map<number, Error>();
  const standing: { uid: number }[][] = surfaces.map(() => []);
  const memo = new Map<string, unknown>();
  for (const a of actions) {
    ev.applying?.(a);
    try {
      const compiled = surfaces.map((s) => s.compile(a, memo));
      compiled.forEach((c, i) => standing[i]!.push(c));
    } catch (e) {
      errors.set(a.uid, e as Error);
    }
  }
  for (const [uid, e] of await applySideBySide(surfaces, standing, ev.ms ?? {}))
    if (!errors.has(uid)) errors.set(uid, e);
  ev.applied?.(actions);
  return errors;
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
export async function executePlan(plan: Plan, surfaces: readonly Driven[], ev: ExecuteEvents): Promise<Execution> {
  const withdraw = inOrder(surfaces, WITHDRAW_ORDER);
  const hooks = {
    critical: ev.critical,
    async apply(a: ApplyAction) {
      const e = (await applyAll(surfaces, [a], ev)).get(a.uid);
      if (e) throw e; // denied below
    },
    async deny(a: FailAction) {
      ev.withdrawing?.(a.uid);
      for (const s of withdraw) await s.plane.deny(a);
    },
    async orphan(a: OrphanAction) {
      ev.withdrawing?.(a.uid);
      for (const s of withdraw) await s.plane.orphan(a);
    },
  };
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
  if (applies.length > 1) {
    try {
      // One pass's subjects at once (a start: one nft transaction instead of one per subject).
      batched = await applyAll(surfaces, applies, ev);
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

/**
 * Every surface applies the same subjects at once (the watcher's map and the network's listener and chains are
 * independent; at 1,000 subjects one after the other added the watcher's ~40 ms to the network's ~110 ms of a
 * chain change). Every surface is let finish before anything is reported, so nothing denies a subject while a
 * surface is still applying it; then a surface that threw throws (the first in the surfaces' order), else the
 * failures of all are merged: a subject that failed on any surface is failed, and the plan denies it on every one.
 * Each surface's time is added to `ms` under its name. `compiled[i]` is what surface i takes, one per subject.
 */
export async function applySideBySide(
  surfaces: readonly Driven[],
  compiled: { uid: number }[][],
  ms: Record<string, number>,
): Promise<Map<number, Error>> {
  const results = await Promise.allSettled(
    surfaces.map(async (s, i) => {
      const t = performance.now();
      try {
        return await s.plane.apply(compiled[i]!);
      } finally {
        ms[s.plane.surface] = (ms[s.plane.surface] ?? 0) + (performance.now() - t);
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
