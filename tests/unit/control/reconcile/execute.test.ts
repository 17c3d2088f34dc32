import { describe, expect, it } from 'vitest';
import { configSchema } from '../../../../src/control/config/schema.js';
import { floorOf } from '../../../../src/control/policy/fragment.js';
import { policyHash, type Resolution } from '../../../../src/control/policy/resolve.js';
import { drive, executePlan, type Driven } from '../../../../src/control/reconcile/execute.js';
import {
  emptyApplied,
  planReconcile,
  type ApplyAction,
  type Observation,
} from '../../../../src/control/reconcile/plan.js';
import type { SurfaceName, Withdrawn } from '../../../../src/dataplane/contract.js';

/** The account of a withdrawn subject (execute hands a plane the plan's action itself). */
const accountOf = (w: Withdrawn) => (w as { account?: string }).account;

const p = floorOf(configSchema.parse({ network: { allow: ['a.com'] } }));
const ok: Resolution = { ok: true, policy: p, hash: policyHash(p), layers: ['floor'], sources: {} };
const bad: Resolution = {
  ok: false,
  failure: { code: 'profile_missing', message: 'profile gone' },
} as unknown as Resolution;

function obs(...subjects: [string, number, Resolution][]): Observation {
  return {
    ok: true,
    mode: 'multi',
    warnings: [],
    subjects: subjects.map(([account, uid, resolution], i) => ({
      subject: { account, uid } as never,
      port: 18000 + i,
      resolution,
    })),
  };
}

/** A surface that writes what it is handed to one shared log, `surface:what:account`. */
function surface(name: SurfaceName, log: string[], opts: { failPrepare?: string } = {}): Driven {
  return drive<ApplyAction>(
    {
      surface: name,
      async apply(actions) {
        for (const a of actions) log.push(`${name}:apply:${a.account}`);
        return new Map();
      },
      deny: async (a) => void log.push(`${name}:deny:${accountOf(a)}`),
      orphan: async (a) => void log.push(`${name}:orphan:${accountOf(a)}`),
      enforcing: () => ({ surface: name, subjects: 0, uids: [] }),
      close: async () => {},
    },
    (a) => {
      if (a.account === opts.failPrepare) throw new Error(`${name} cannot compile it`);
      return a;
    },
  );
}

describe('executing a plan over the surfaces', () => {
  it('withdraws a subject from the gate first, then the watcher map, then the network; the service hears each', async () => {
    const log: string[] = [];
    const surfaces = [surface('filesystem', log), surface('network', log), surface('tools', log)];
    const plan = planReconcile(emptyApplied('multi'), obs(['leash-a', 1, ok], ['leash-b', 2, bad]));
    const ex = await executePlan(plan, surfaces, {
      critical: () => {},
      applying: (a) => log.push(`applying:${a.account}`),
      applied: (as) => log.push(`applied:${as.map((a) => a.account).join(',')}`),
      withdrawing: (uid) => log.push(`withdrawing:${uid}`),
    });
    expect(log).toEqual([
      'applying:leash-a',
      'filesystem:apply:leash-a',
      'network:apply:leash-a',
      'tools:apply:leash-a',
      'applied:leash-a',
      'withdrawing:2',
      'tools:deny:leash-b',
      'filesystem:deny:leash-b',
      'network:deny:leash-b',
    ]);
    expect(ex.applied).toEqual(['leash-a']);
    expect(ex.denied).toEqual(['leash-b']);
  });

  it('a subject one surface cannot prepare is applied by none and denied by all; the others still apply', async () => {
    const log: string[] = [];
    const surfaces = [
      surface('filesystem', log),
      surface('network', log),
      surface('tools', log, { failPrepare: 'leash-a' }),
    ];
    const critical: string[] = [];
    const plan = planReconcile(emptyApplied('multi'), obs(['leash-a', 1, ok], ['leash-b', 2, ok]));
    const ex = await executePlan(plan, surfaces, { critical: (m) => void critical.push(m) });
    expect(log.filter((l) => l.includes('leash-a'))).toEqual([
      'tools:deny:leash-a',
      'filesystem:deny:leash-a',
      'network:deny:leash-a',
    ]);
    expect(log.filter((l) => l.includes(':apply:'))).toEqual([
      'filesystem:apply:leash-b',
      'network:apply:leash-b',
      'tools:apply:leash-b',
    ]);
    expect(ex.applied).toEqual(['leash-b']);
    expect(critical.join('\n')).toMatch(/leash-a .*fails alone.*tools cannot compile it/);
  });
});
