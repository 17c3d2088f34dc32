import { describe, expect, it } from 'vitest';
import { compilePolicy, decide, type Mode } from '../../../../src/engine/index.js';
import { fsCmdPolicyOf } from '../../../../src/enforcers/watcher/policy.js';

// The watcher does not hold events yet: what it is given must block every path the engine asks about
// (in both modes) and change nothing else. Judged here by the engine over the watcher's own policy
// (the native matcher is the engine's twin: tests/native/matcher-diff.test.ts).
describe('the watcher policy of an ask entry', () => {
  const judge = (mode: Mode, lists: { allow?: string[]; ask?: string[] }, path: string) => {
    const p = fsCmdPolicyOf(
      {
        fail_mode: 'closed',
        filesystem: { mode, allow: [], deny: [], ...lists },
        commands: { mode: 'whitelist', allow: [], deny: [], interpreters: [] },
      },
      () => [],
    );
    const compiled = compilePolicy({
      fail_mode: 'closed',
      network: { mode: 'whitelist', allow: [], deny: [] },
      filesystem: p.filesystem,
      commands: p.commands,
      tools: { mode: 'whitelist', allow: [], deny: [], inspect: { secrets: 'block', pii: 'log', priv_esc: 'block' } },
    });
    return decide('filesystem', { path }, compiled).action;
  };

  it.each<[Mode, { allow?: string[]; ask?: string[] }, string, 'allow' | 'block']>([
    ['blacklist', { ask: ['/srv/a'] }, '/srv/a/x', 'block'],
    ['blacklist', { ask: ['/srv/a'] }, '/srv/b', 'allow'],
    ['whitelist', { ask: ['/srv/a'] }, '/srv/a/x', 'block'],
    ['whitelist', { ask: ['/srv/a'], allow: ['/srv/a'] }, '/srv/a/x', 'allow'],
    ['whitelist', { ask: ['/srv/a'], allow: ['/srv'] }, '/srv/b', 'allow'],
  ])('%s %j: %s is answered %s', (mode, lists, path, want) => {
    expect(judge(mode, lists, path)).toBe(want);
  });
});
