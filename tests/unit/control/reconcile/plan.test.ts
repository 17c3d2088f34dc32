import { describe, expect, it } from 'vitest';
import { configSchema } from '../../../../src/control/config/schema.js';
import { floorOf } from '../../../../src/control/policy/fragment.js';
import type { Resolution } from '../../../../src/control/policy/resolve.js';
import { policyHash } from '../../../../src/control/policy/resolve.js';
import type { AppliedState, AppliedSubject, Observation, Observed } from '../../../../src/control/reconcile/plan.js';
import { emptyApplied, planReconcile, type ApplyAction } from '../../../../src/control/reconcile/plan.js';
import { executePlan } from '../../../../src/control/reconcile/execute.js';
import { drive } from '../../../../src/control/reconcile/execute.js';
import type { Surface, Withdrawn } from '../../../../src/dataplane/contract.js';

const pA = floorOf(configSchema.parse({ network: { allow: ['a.com'] } }));
const pB = floorOf(configSchema.parse({ network: { allow: ['b.com'] } }));
const ok = (p = pA): Resolution => ({ ok: true, policy: p, hash: policyHash(p), layers: ['floor'], sources: {} });
const bad: Resolution = {
  ok: false,
  failure: { code: 'dangling_profile', scope: 'agent:leash-x', profile: 'gone', message: 'dangling' },
};

function obs(...subjects: [string, number, number | null, Resolution][]): Observation {
  return {
    ok: true,
    mode: 'multi',
    warnings: [],
    subjects: subjects.map(([account, uid, port, resolution]): Observed => ({
      subject: { kind: 'agent', account, uid },
      port,
      resolution,
    })),
  };
}
function applied(...subjects: [string, number, number | null, AppliedSubject['state'], string | null][]): AppliedState {
  return {
    mode: 'multi',
    subjects: new Map(subjects.map(([account, uid, port, state, hash]) => [uid, { account, uid, port, state, hash }])),
  };
}
const hA = policyHash(pA);

describe('reconcile planner', () => {
  it.each<[string, AppliedState, Observation, string[]]>([
    ['a new subject is added', applied(), obs(['leash-a', 1, 18000, ok()]), ['add:leash-a']],
    [
      'an unchanged subject is not touched',
      applied(['leash-a', 1, 18000, 'active', hA]),
      obs(['leash-a', 1, 18000, ok()]),
      ['unchanged:leash-a'],
    ],
    [
      'a changed policy re-applies that one chain',
      applied(['leash-a', 1, 18000, 'active', hA], ['leash-b', 2, 18001, 'active', hA]),
      obs(['leash-a', 1, 18000, ok(pB)], ['leash-b', 2, 18001, ok()]),
      ['reapply:leash-a', 'unchanged:leash-b'],
    ],
    [
      'a subject that fails is failed alone',
      applied(['leash-a', 1, 18000, 'active', hA], ['leash-b', 2, 18001, 'active', hA]),
      obs(['leash-a', 1, 18000, bad], ['leash-b', 2, 18001, ok()]),
      ['fail:leash-a', 'unchanged:leash-b'],
    ],
    [
      'a still-failing subject is left as it is',
      applied(['leash-a', 1, 18000, 'failed', null]),
      obs(['leash-a', 1, 18000, bad]),
      ['unchanged:leash-a'],
    ],
    [
      'a failed subject that resolves again gets its chain',
      applied(['leash-a', 1, 18000, 'failed', null]),
      obs(['leash-a', 1, 18000, ok()]),
      ['add:leash-a'],
    ],
    [
      'a subject that left discovery keeps its chain, loses its policy',
      applied(['leash-a', 1, 18000, 'active', hA], ['leash-b', 2, 18001, 'active', hA]),
      obs(['leash-b', 2, 18001, ok()]),
      ['unchanged:leash-b', 'orphan:leash-a'],
    ],
    [
      'an orphan stays orphaned without churn',
      applied(['leash-a', 1, 18000, 'orphaned', null]),
      obs(),
      ['unchanged:leash-a'],
    ],
    [
      'an orphan that returns is re-applied on its kept chain',
      applied(['leash-a', 1, 18000, 'orphaned', null]),
      obs(['leash-a', 1, 18000, ok()]),
      ['reapply:leash-a'],
    ],
    [
      'no port from the pool fails that subject alone',
      applied(),
      obs(['leash-a', 1, null, ok()], ['leash-b', 2, 18001, ok()]),
      ['fail:leash-a', 'add:leash-b'],
    ],
  ])('%s', (_n, prev, o, expected) => {
    const plan = planReconcile(prev, o);
    expect(plan.ok).toBe(true);
    expect(plan.actions.map((a) => `${a.kind}:${a.account}`)).toEqual(expected);
  });

  it('a wholesale failure plans nothing and keeps what is applied', () => {
    const prev = applied(['leash-a', 1, 18000, 'active', hA]);
    const plan = planReconcile(prev, { ok: false, code: 'passwd_unreadable', message: 'EACCES' });
    expect(plan.ok).toBe(false);
    expect(plan.actions).toEqual([]);
    expect(plan.next).toBe(prev);
  });

  it('grows a single-subject service for its first agent: the agent is added, the user moves to its own port', () => {
    const prev: AppliedState = {
      mode: 'single',
      subjects: new Map([[1000, { account: 'fido', uid: 1000, port: 18443, state: 'active', hash: hA }]]),
    };
    const o = obs(['leash-a', 1, 18000, ok()]);
    if (!o.ok) throw new Error('obs');
    o.subjects.push({ subject: { kind: 'user', account: 'fido', uid: 1000 }, port: 18002, resolution: ok() });
    const plan = planReconcile(prev, o);
    expect(plan.ok).toBe(true);
    expect(plan.next.mode).toBe('multi');
    expect(plan.actions.map((a) => [a.kind, a.uid])).toEqual([
      ['add', 1],
      ['reapply', 1000],
    ]);
    expect(plan.next.subjects.get(1000)?.port).toBe(18002);
  });

  it('a single-subject service keeps the user on the reserved port; its first agent grows it to multi', () => {
    const user = (r: Resolution): Observation => ({
      ok: true,
      mode: 'single',
      warnings: [],
      subjects: [{ subject: { kind: 'user', account: 'fido', uid: 1000 }, port: 18443, resolution: r }],
    });
    const start = planReconcile(emptyApplied('single'), user(ok()));
    expect(start.actions).toMatchObject([{ kind: 'add', account: 'fido', port: 18443 }]);
    const changed = planReconcile(start.next, user(ok(pB)));
    expect(changed.actions.map((a) => a.kind)).toEqual(['reapply']);
    const empty = planReconcile(emptyApplied('single'), obs(['leash-a', 1, 18000, ok()]));
    expect(empty.ok && empty.next.mode).toBe('multi');
    expect(empty.actions).toMatchObject([{ kind: 'add', account: 'leash-a', port: 18000 }]);
  });

  it('records the state the actions lead to', () => {
    const plan = planReconcile(
      applied(['leash-a', 1, 18000, 'active', hA]),
      obs(['leash-a', 1, 18000, bad], ['leash-b', 2, 18001, ok(pB)]),
    );
    expect(plan.ok && [...plan.next.subjects.values()].map((s) => `${s.account}:${s.state}`)).toEqual([
      'leash-a:failed',
      'leash-b:active',
    ]);
    const fail = plan.actions.find((a) => a.kind === 'fail');
    expect(fail && fail.kind === 'fail' && fail.hadChain).toBe(true);
  });
});

describe('executing a plan', () => {
  /**
   * One surface that records what it is handed: each apply call's subjects (`kind:account`, a call of several is
   * one batch), each deny and orphan. `failApply` subjects come back failed; `throwBatch` makes a call of several throw.
   */
  function hooks(failApply: string[] = [], throwBatch = false) {
    const calls: string[] = [];
    const batches: string[][] = [];
    const critical: string[] = [];
    const accountOf = (w: Withdrawn) => (w as { account?: string }).account;
    const surface: Surface<ApplyAction> = {
      surface: 'network',
      async apply(actions: ApplyAction[]) {
        if (actions.length > 1) {
          batches.push(actions.map((a) => a.account));
          if (throwBatch) throw new Error('nft vanished');
        } else calls.push(`${actions[0]!.kind}:${actions[0]!.account}`);
        const errors = new Map<number, Error>();
        for (const a of actions)
          if (failApply.includes(a.account)) errors.set(a.uid, new Error('listener would not bind'));
        return errors;
      },
      deny: async (a) => void calls.push(`deny:${accountOf(a)}`),
      orphan: async (a) => void calls.push(`orphan:${accountOf(a)}`),
      enforcing: () => ({ surface: 'network', subjects: 0, uids: [] }),
      close: async () => {},
    };
    return {
      calls,
      batches,
      critical,
      surfaces: [drive(surface, (a) => a)],
      ev: { critical: (m: string) => void critical.push(m) },
    };
  }

  it('touches only what changed, and a subject whose apply fails is denied alone', async () => {
    const prev = applied(
      ['leash-a', 1, 18000, 'active', hA],
      ['leash-b', 2, 18001, 'active', hA],
      ['leash-c', 3, 18002, 'active', hA],
    );
    const plan = planReconcile(
      prev,
      obs(
        ['leash-a', 1, 18000, ok()],
        ['leash-b', 2, 18001, ok(pB)],
        ['leash-c', 3, 18002, ok(pB)],
        ['leash-d', 4, 18003, bad],
      ),
    );
    const { calls, batches, critical, surfaces, ev } = hooks(['leash-b']);
    const ex = await executePlan(plan, surfaces, ev);
    // leash-a is unchanged: it is not handed to any surface.
    expect(batches).toEqual([['leash-b', 'leash-c']]);
    expect(calls).toEqual(['deny:leash-b', 'deny:leash-d']);
    expect(ex.applied).toEqual(['leash-c']);
    expect(ex.denied).toEqual(['leash-b', 'leash-d']);
    expect(critical.join('\n')).toMatch(/leash-b .*fails alone.*listener would not bind/);
    expect(ex.state.subjects.get(2)?.state).toBe('failed');
    expect(ex.state.subjects.get(3)?.state).toBe('active');
    // The next pass retries the failed one as a new chain and leaves the rest alone.
    const again = planReconcile(
      ex.state,
      obs(
        ['leash-a', 1, 18000, ok()],
        ['leash-b', 2, 18001, ok(pB)],
        ['leash-c', 3, 18002, ok(pB)],
        ['leash-d', 4, 18003, bad],
      ),
    );
    expect(again.actions.map((a) => `${a.kind}:${a.account}`)).toEqual([
      'unchanged:leash-a',
      'add:leash-b',
      'unchanged:leash-c',
      'unchanged:leash-d',
    ]);
  });

  it('applies several subjects as one batch; a subject the batch failed is denied alone', async () => {
    const plan = planReconcile(
      emptyApplied('multi'),
      obs(
        ['leash-a', 1, 18000, ok()],
        ['leash-b', 2, 18001, ok(pB)],
        ['leash-c', 3, 18002, ok()],
        ['leash-d', 4, 18003, bad],
      ),
    );
    const { calls, batches, critical, surfaces, ev } = hooks(['leash-b']);
    const ex = await executePlan(plan, surfaces, ev);
    expect(batches).toEqual([['leash-a', 'leash-b', 'leash-c']]);
    expect(calls).toEqual(['deny:leash-b', 'deny:leash-d']); // no per-subject apply
    expect(ex.applied).toEqual(['leash-a', 'leash-c']);
    expect(ex.denied).toEqual(['leash-b', 'leash-d']);
    expect(critical.join('\n')).toMatch(/leash-b .*fails alone.*listener would not bind/);
    expect(ex.state.subjects.get(2)?.state).toBe('failed');
  });

  it('a batch that throws is redone subject by subject', async () => {
    const plan = planReconcile(emptyApplied('multi'), obs(['leash-a', 1, 18000, ok()], ['leash-b', 2, 18001, ok(pB)]));
    const { calls, critical, surfaces, ev } = hooks([], true);
    const ex = await executePlan(plan, surfaces, ev);
    expect(calls).toEqual(['add:leash-a', 'add:leash-b']);
    expect(ex.applied).toEqual(['leash-a', 'leash-b']);
    expect(critical.join('\n')).toMatch(/one by one: nft vanished/);
  });

  it('a wholesale failure touches nothing and says so', async () => {
    const prev = applied(['leash-a', 1, 18000, 'active', hA]);
    const { calls, critical, surfaces, ev } = hooks();
    const ex = await executePlan(
      planReconcile(prev, { ok: false, code: 'ports_corrupt', message: 'bad json' }),
      surfaces,
      ev,
    );
    expect(calls).toEqual([]);
    expect(critical[0]).toMatch(/changed nothing/);
    expect(ex.state.subjects.get(1)?.state).toBe('active');
  });
});
