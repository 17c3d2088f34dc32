import { describe, expect, it } from 'vitest';
import { configSchema } from '../../../../src/control/config/schema.js';
import type { BindingsDoc } from '../../../../src/control/policy/bindings.js';
import type { Effective, Fragment } from '../../../../src/control/policy/fragment.js';
import { floorOf } from '../../../../src/control/policy/fragment.js';
import type { ProfileStatus } from '../../../../src/control/policy/profiles.js';
import type { PolicyState } from '../../../../src/control/policy/resolve.js';
import { policyHash, resolveSubject } from '../../../../src/control/policy/resolve.js';
import type { Subject } from '../../../../src/control/subjects/discovery.js';

const floor: Effective = floorOf(
  configSchema.parse({
    user: 'fido',
    network: { mode: 'whitelist', allow: ['github.com'] },
    commands: { mode: 'blacklist', deny: ['ssh'] },
  }),
);
const iris: Subject = { kind: 'agent', account: 'leash-iris', uid: 2001 };
const vader: Subject = { kind: 'agent', account: 'leash-vader', uid: 2002 };
const fido: Subject = { kind: 'user', account: 'fido', uid: 1000 };

function state(bindings: BindingsDoc['bindings'], profiles: Record<string, Fragment | 'broken'>): PolicyState {
  return {
    floor,
    bindings: { version: 1, bindings },
    profile: (name): ProfileStatus => {
      const p = profiles[name];
      if (p === undefined) return { status: 'missing', name };
      if (p === 'broken') return { status: 'broken', name, message: 'bad yaml' };
      return { status: 'ok', name, fragment: p, hash: 'h', text: '' };
    },
  };
}

describe('resolve', () => {
  it('resolves a subject with no bindings to the floor', () => {
    const r = resolveSubject(iris, state({}, {}));
    expect(r.ok && r.policy).toEqual(floor);
    expect(r.ok && r.hash).toBe(policyHash(floor));
  });

  it('folds global, then the agent overlay; other agents get only global', () => {
    const s = state(
      {
        global: { profile: 'g', acks: [] },
        'agent:leash-iris': { profile: 'web', acks: ['network.allow:openai.com'] },
      },
      { g: { commands: { deny: ['ssh', 'nc'] } }, web: { network: { allow: ['github.com', 'openai.com'] } } },
    );
    const r = resolveSubject(iris, s);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.policy.commands.deny).toEqual(['ssh', 'nc']);
    expect(r.policy.network.allow).toEqual(['github.com', 'openai.com']);
    expect(r.layers).toEqual(['floor', 'global=g', 'agent:leash-iris=web']);
    const v = resolveSubject(vader, s);
    expect(v.ok && v.policy.network.allow).toEqual(['github.com']);
    expect(v.ok && v.policy.commands.deny).toEqual(['ssh', 'nc']);
  });

  it('never lets an agent binding re-point the configured user', () => {
    const s = state({ 'agent:fido': { profile: 'open', acks: ['fail_mode:open'] } }, { open: { fail_mode: 'open' } });
    const r = resolveSubject(fido, s);
    expect(r.ok && r.policy.fail_mode).toBe('closed');
  });

  it.each([
    ['dangling_profile', { 'agent:leash-iris': { profile: 'gone', acks: [] } }, {}],
    ['broken_profile', { 'agent:leash-iris': { profile: 'b', acks: [] } }, { b: 'broken' as const }],
    [
      'unacknowledged_loosening',
      { 'agent:leash-iris': { profile: 'o', acks: [] } },
      { o: { fail_mode: 'open' as const } },
    ],
  ])('fails the subject alone: %s', (code, bindings, profiles) => {
    const s = state(bindings as BindingsDoc['bindings'], profiles as Record<string, Fragment | 'broken'>);
    const r = resolveSubject(iris, s);
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.failure.code).toBe(code);
      expect(r.failure.scope).toBe('agent:leash-iris');
    }
    expect(resolveSubject(vader, s).ok).toBe(true);
    expect(resolveSubject(fido, s).ok).toBe(true);
  });

  it('judges a global binding against the unfolded floor (folding would classify nothing)', () => {
    const s = state(
      { global: { profile: 'wide', acks: [] } },
      { wide: { fail_mode: 'open', network: { mode: 'blacklist' } } },
    );
    for (const subj of [iris, fido]) {
      const r = resolveSubject(subj, s);
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.failure.missing?.map((m) => m.token)).toEqual(['fail_mode:open', 'network.mode:blacklist']);
    }
  });

  it('judges an agent binding against the real folded base, not the floor file', () => {
    // global tightened github.com away; the agent's profile puts it back: a loosening against the folded base only.
    const s = state(
      { global: { profile: 'tight', acks: [] }, 'agent:leash-iris': { profile: 'gh', acks: [] } },
      { tight: { network: { allow: [] } }, gh: { network: { allow: ['github.com'] } } },
    );
    const r = resolveSubject(iris, s);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.failure.missing?.map((m) => m.token)).toEqual(['network.allow:github.com']);
  });

  it('hashes canonically: key order does not matter, content does', () => {
    const a = { ...floor };
    const { tools, ...rest } = floor;
    const reordered = JSON.parse(JSON.stringify({ tools, ...rest })) as Effective;
    expect(policyHash(reordered)).toBe(policyHash(a));
    expect(policyHash({ ...floor, fail_mode: 'open' })).not.toBe(policyHash(floor));
  });
});

describe('resolved policies through the engine', () => {
  it('each agent is decided against its own resolved policy', async () => {
    const { compilePolicy, decide } = await import('../../../../src/engine/index.js');
    const s = state(
      { 'agent:leash-iris': { profile: 'web', acks: ['network.allow:openai.com', 'commands.unset.deny:ssh'] } },
      { web: { network: { allow: ['github.com', 'openai.com'] }, commands: { deny: [] } } },
    );
    const verdict = (subj: Subject, domain: string) => {
      const r = resolveSubject(subj, s);
      if (!r.ok) throw new Error(r.failure.message);
      return decide('network', { domain, port: 443 }, compilePolicy(r.policy)).action;
    };
    expect(verdict(iris, 'api.openai.com')).toBe('allow');
    expect(verdict(vader, 'api.openai.com')).toBe('block');
    expect(verdict(fido, 'api.openai.com')).toBe('block');
    expect(verdict(vader, 'github.com')).toBe('allow');
    const ssh = (subj: Subject) => {
      const r = resolveSubject(subj, s);
      return r.ok ? decide('commands', { binary: '/usr/bin/ssh' }, compilePolicy(r.policy)).action : null;
    };
    expect(ssh(iris)).toBe('allow');
    expect(ssh(vader)).toBe('block');
  });
});
