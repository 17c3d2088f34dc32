import { describe, expect, it } from 'vitest';
import {
  compilePolicy,
  decide,
  decideNoPolicy,
  type Mode,
  type Surface,
  type SubjectOf,
  type PolicyInput,
} from '../../../src/engine/index.js';
import { makePolicy } from './helpers.js';

/** One entry and a subject it matches, per surface. */
const cases: { [S in Surface]: { entry: string; subject: SubjectOf[S]; other: SubjectOf[S] } } = {
  network: {
    entry: 'github.com',
    subject: { domain: 'api.github.com', ip: '140.82.112.3', port: 443 },
    other: { domain: 'example.org', port: 443 },
  },
  filesystem: { entry: '/home/a', subject: { path: '/home/a/notes.txt' }, other: { path: '/home/ab' } },
  commands: { entry: 'curl', subject: { binary: '/usr/bin/curl' }, other: { binary: '/usr/bin/ls' } },
  tools: { entry: 'run_shell', subject: { name: 'run_shell', inputs: {} }, other: { name: 'read_file', inputs: {} } },
};

function withSurface(
  surface: Surface,
  mode: Mode,
  allow: string[],
  deny: string[],
  failMode: 'open' | 'closed' = 'closed',
): PolicyInput {
  return makePolicy({ fail_mode: failMode, [surface]: { mode, allow, deny } });
}

const surfaces = Object.keys(cases) as Surface[];

describe('decide: modes and deny-wins', () => {
  it.each(surfaces)('%s: deny wins over allow in whitelist mode', (surface) => {
    const c = cases[surface];
    const v = decide(
      surface,
      c.subject as never,
      compilePolicy(withSurface(surface, 'whitelist', [c.entry], [c.entry])),
    );
    expect(v).toEqual({ action: 'block', reason: 'deny_entry', source: 'deny', rule: c.entry });
  });

  it.each(surfaces)('%s: deny blocks in blacklist mode', (surface) => {
    const c = cases[surface];
    const v = decide(
      surface,
      c.subject as never,
      compilePolicy(withSurface(surface, 'blacklist', [c.entry], [c.entry])),
    );
    expect(v).toEqual({ action: 'block', reason: 'deny_entry', source: 'deny', rule: c.entry });
  });

  it.each(surfaces)('%s: whitelist allows a listed subject', (surface) => {
    const c = cases[surface];
    const v = decide(surface, c.subject as never, compilePolicy(withSurface(surface, 'whitelist', [c.entry], [])));
    expect(v).toEqual({ action: 'allow', reason: 'allow_entry', source: 'allow', rule: c.entry });
  });

  it.each(surfaces)('%s: whitelist blocks an unlisted subject by the mode default', (surface) => {
    const c = cases[surface];
    const v = decide(surface, c.other as never, compilePolicy(withSurface(surface, 'whitelist', [c.entry], [])));
    expect(v).toEqual({ action: 'block', reason: 'not_allowed', source: 'mode', rule: null });
  });

  it.each(surfaces)('%s: blacklist allows an unlisted subject by the mode default', (surface) => {
    const c = cases[surface];
    const v = decide(surface, c.other as never, compilePolicy(withSurface(surface, 'blacklist', [], [c.entry])));
    expect(v).toEqual({ action: 'allow', reason: 'mode_allow', source: 'mode', rule: null });
  });

  it.each(surfaces)('%s: blacklist never consults the allow list', (surface) => {
    const c = cases[surface];
    const v = decide(surface, c.subject as never, compilePolicy(withSurface(surface, 'blacklist', [c.entry], [])));
    expect(v.reason).toBe('mode_allow');
    expect(v.rule).toBeNull();
  });

  it.each(surfaces)('%s: an unknown mode is read as whitelist (default-deny)', (surface) => {
    const c = cases[surface];
    const p = withSurface(surface, 'blackList' as Mode, [], []);
    expect(decide(surface, c.other as never, compilePolicy(p)).reason).toBe('not_allowed');
  });

  it('keeps surfaces apart: a network entry says nothing about files', () => {
    const p = compilePolicy(makePolicy({ network: { mode: 'whitelist', allow: ['/home/a'], deny: [] } }));
    expect(decide('filesystem', { path: '/home/a' }, p).action).toBe('block');
  });
});

describe('decide: failure modes', () => {
  it('blocks with no_policy when there is no policy', () => {
    expect(decide('network', { domain: 'github.com', port: 443 }, null)).toEqual({
      action: 'block',
      reason: 'no_policy',
      source: 'fail_mode',
      rule: null,
    });
  });

  it('allows with no_policy under fail_mode open', () => {
    expect(decide('filesystem', { path: '/x' }, null, { failMode: 'open' }).action).toBe('allow');
    expect(decideNoPolicy('open')).toEqual({ action: 'allow', reason: 'no_policy', source: 'fail_mode', rule: null });
    expect(decideNoPolicy()).toMatchObject({ action: 'block', reason: 'no_policy' });
  });

  it('treats a fail_mode typo as closed', () => {
    expect(decideNoPolicy('opne' as never).action).toBe('block');
    const p = compilePolicy(makePolicy({ fail_mode: 'Open' as never }));
    expect(decide('network', { port: -1 } as never, p)).toMatchObject({ action: 'block', reason: 'engine_error' });
  });

  const malformed: [Surface, unknown][] = [
    ['network', { ip: 'not-an-ip', port: 443 }],
    ['network', { ip: '10.1.2.3', port: 70000 }],
    ['network', { domain: 'github.com', port: '443' }],
    ['network', { domain: 42, port: 443 }],
    ['filesystem', { path: 'relative/path' }],
    ['filesystem', { path: 7 }],
    ['commands', { binary: '' }],
    ['commands', { binary: 'bin/ls' }],
    ['tools', { name: null }],
    ['network', null],
    ['filesystem', 'just a string'],
    ['bogus' as Surface, { path: '/x' }],
  ];

  it.each(malformed)('%s subject %j is engine_error, blocked under fail_mode closed', (surface, subject) => {
    const p = compilePolicy(makePolicy({ [surface]: { mode: 'blacklist', allow: [], deny: [] } }));
    expect(decide(surface, subject as never, p)).toEqual({
      action: 'block',
      reason: 'engine_error',
      source: 'fail_mode',
      rule: null,
    });
  });

  it.each(malformed)('%s subject %j is engine_error, allowed under fail_mode open', (surface, subject) => {
    const p = compilePolicy(makePolicy({ fail_mode: 'open', [surface]: { mode: 'whitelist', allow: [], deny: [] } }));
    expect(decide(surface, subject as never, p)).toMatchObject({ action: 'allow', reason: 'engine_error' });
  });

  it('turns an internal throw into engine_error', () => {
    const p = compilePolicy(makePolicy());
    const broken = {
      ...p,
      filesystem: {
        ...p.filesystem,
        deny: {
          match: () => {
            throw new Error('boom');
          },
        },
      },
    };
    expect(decide('filesystem', { path: '/x' }, broken as never)).toMatchObject({
      action: 'block',
      reason: 'engine_error',
    });
  });

  it('compiles a partial or malformed policy without throwing', () => {
    const p = compilePolicy({
      fail_mode: 'closed',
      network: { mode: 'blacklist', allow: 'x', deny: [1, null, 'evil.com'] },
    } as never);
    expect(decide('network', { domain: 'www.evil.com', port: 80 }, p).rule).toBe('evil.com');
    expect(decide('network', { domain: 'good.com', port: 80 }, p).reason).toBe('mode_allow');
    expect(decide('filesystem', { path: '/x' }, p).reason).toBe('not_allowed');
  });
});
