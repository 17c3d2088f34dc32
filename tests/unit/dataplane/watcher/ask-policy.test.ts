import { describe, expect, it } from 'vitest';
import { compilePolicy, decide, type Mode } from '../../../../src/engine/index.js';
import { fsCmdPolicyOf, policyRoots } from '../../../../src/dataplane/watcher/policy.js';

// The watcher holds asked events for an approver (native/watcher/hold.h): what it is given must ask about exactly
// the paths the engine asks about (in both modes: a blacklist's ask entry is no longer compiled as a deny)
// and change nothing else. Judged here by the engine over the watcher's own policy; the native AskOf
// follows the same order (deny, allow, ask), tested end to end in tests/integration/watcher-hold.test.ts.
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

  it.each<[Mode, { allow?: string[]; ask?: string[] }, string, 'allow' | 'block' | 'ask']>([
    ['blacklist', { ask: ['/srv/a'] }, '/srv/a/x', 'ask'],
    ['blacklist', { ask: ['/srv/a'] }, '/srv/b', 'allow'],
    ['whitelist', { ask: ['/srv/a'] }, '/srv/a/x', 'ask'],
    ['whitelist', { ask: ['/srv/a'] }, '/srv/b', 'block'],
    ['whitelist', { ask: ['/srv/a'], allow: ['/srv/a'] }, '/srv/a/x', 'allow'],
    ['whitelist', { ask: ['/srv/a'], allow: ['/srv'] }, '/srv/b', 'allow'],
  ])('%s %j: %s is answered %s', (mode, lists, path, want) => {
    expect(judge(mode, lists, path)).toBe(want);
  });

  it("marks the filesystem of an ask entry (a blacklist's ask path must raise events)", () => {
    const p = fsCmdPolicyOf(
      {
        fail_mode: 'closed',
        filesystem: { mode: 'blacklist', allow: [], deny: [], ask: ['/srv/asked/*.key'] },
        commands: { mode: 'blacklist', allow: [], deny: [], ask: ['/opt/tools/run'], interpreters: [] },
      },
      () => [],
    );
    expect(p.filesystem.ask).toEqual(['/srv/asked/*.key']);
    expect(p.commands.ask).toEqual(['/opt/tools/run']);
    expect(p.filesystem.deny).toEqual([]);
    expect(policyRoots(p).sort()).toEqual(['/opt/tools', '/srv/asked']);
  });
});
