import { describe, expect, it } from 'vitest';
import {
  compilePolicy,
  decide,
  decideDnsName,
  type Mode,
  type Surface,
  type SubjectOf,
} from '../../../src/engine/index.js';
import { makePolicy } from './helpers.js';

/** One entry and a subject it matches, per surface. */
const cases: { [S in Surface]: { entry: string; subject: SubjectOf[S] } } = {
  network: { entry: 'api.lab', subject: { domain: 'api.lab', ip: '198.18.0.9', port: 443 } },
  filesystem: { entry: '/srv/data', subject: { path: '/srv/data/report.csv' } },
  commands: { entry: 'curl', subject: { binary: '/usr/bin/curl' } },
  tools: { entry: 'run_shell', subject: { name: 'run_shell', inputs: {} } },
};
const surfaces = Object.keys(cases) as Surface[];

function policy(surface: Surface, mode: Mode, lists: { allow?: string[]; deny?: string[]; ask?: string[] }) {
  return compilePolicy(makePolicy({ [surface]: { mode, allow: [], deny: [], ...lists } }));
}

describe('decide: ask', () => {
  it.each(surfaces)('%s: whitelist asks about an ask entry instead of blocking it', (surface) => {
    const c = cases[surface];
    const v = decide(surface, c.subject as never, policy(surface, 'whitelist', { ask: [c.entry] }));
    expect(v).toEqual({ action: 'ask', reason: 'ask_entry', source: 'ask', rule: c.entry });
  });

  it.each(surfaces)('%s: blacklist asks about an ask entry instead of allowing it', (surface) => {
    const c = cases[surface];
    const v = decide(surface, c.subject as never, policy(surface, 'blacklist', { ask: [c.entry] }));
    expect(v).toEqual({ action: 'ask', reason: 'ask_entry', source: 'ask', rule: c.entry });
  });

  it.each(surfaces.flatMap((s) => (['whitelist', 'blacklist'] as Mode[]).map((m) => [s, m] as const)))(
    '%s %s: deny wins over ask',
    (surface, mode) => {
      const c = cases[surface];
      const v = decide(surface, c.subject as never, policy(surface, mode, { ask: [c.entry], deny: [c.entry] }));
      expect(v).toMatchObject({ action: 'block', reason: 'deny_entry' });
    },
  );

  it.each(surfaces)('%s: in a whitelist an allow entry wins over ask (an approval persisted stops the asking)', (s) => {
    const c = cases[s];
    const v = decide(s, c.subject as never, policy(s, 'whitelist', { ask: [c.entry], allow: [c.entry] }));
    expect(v).toMatchObject({ action: 'allow', reason: 'allow_entry' });
  });

  it.each(surfaces)('%s: in a blacklist the allow list still is not consulted, ask wins', (s) => {
    const c = cases[s];
    const v = decide(s, c.subject as never, policy(s, 'blacklist', { ask: [c.entry], allow: [c.entry] }));
    expect(v.action).toBe('ask');
  });

  it('network: a broader ask entry covers a subdomain on its port only when it names one', () => {
    const p = policy('network', 'whitelist', { ask: ['lab:443'] });
    expect(decide('network', { domain: 'api.lab', port: 443 }, p).action).toBe('ask');
    expect(decide('network', { domain: 'api.lab', port: 80 }, p)).toMatchObject({
      action: 'block',
      reason: 'not_allowed',
    });
  });

  it('tools: a blocking inspection finding blocks an asked call (the approver never sees it to wave through)', () => {
    const p = policy('tools', 'whitelist', { ask: ['run_shell'] });
    const v = decide('tools', { name: 'run_shell', inputs: { cmd: 'echo AKIAIOSFODNN7EXAMPLE' } }, p);
    expect(v).toMatchObject({ action: 'block', reason: 'inspect_secrets' });
  });

  it('commands: an interpreter run directly is still blocked, ask entry or not', () => {
    const p = compilePolicy(
      makePolicy({
        commands: { mode: 'whitelist', allow: [], deny: [], ask: ['/lib/ld.so'], interpreters: ['/lib/ld.so'] },
      }),
    );
    expect(decide('commands', { binary: '/lib/ld.so' }, p)).toMatchObject({
      action: 'block',
      reason: 'interpreter_direct',
    });
  });

  it('dns: a name an ask entry covers is answered (the connection is the question)', () => {
    const p = policy('network', 'whitelist', { ask: ['api.lab'] });
    expect(decideDnsName('api.lab', p)).toMatchObject({ action: 'allow', reason: 'ask_entry', rule: 'api.lab' });
    expect(decideDnsName('other.lab', p)).toMatchObject({ action: 'block', reason: 'not_allowed' });
  });
});
