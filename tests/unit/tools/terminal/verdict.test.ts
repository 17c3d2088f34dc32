import { describe, expect, it } from 'vitest';
import { engineDeciderFactory } from '../../../../src/tools/terminal/decider.js';
import { commandEntryMatches } from '../../../../src/engine/index.js';
import { matchDenyArgs } from '../../../../src/tools/terminal/match.js';
import { judge } from '../../../../src/tools/terminal/verdict.js';
import type { ResolvedBinary } from '../../../../src/tools/terminal/resolve.js';
import type { CommandDecider, TerminalPolicy } from '../../../../src/tools/terminal/types.js';
import type { Verdict } from '../../../../src/engine/types.js';

const localDeciderFactory = engineDeciderFactory();

const policy = (c: Partial<TerminalPolicy['commands']>): TerminalPolicy => ({
  fail_mode: 'closed',
  commands: { mode: 'whitelist', allow: [], deny: [], args: {}, ...c },
});
const at = (p: string | null, real: string | null = p): ResolvedBinary => ({ path: p, real, error: null });

describe('command entry matching', () => {
  it.each([
    ['git', '/usr/bin/git', true],
    ['git', '/usr/bin/git2', false],
    ['git', '/usr/bin/GIT', false],
    ['/usr/bin/git', '/usr/bin/git', true],
    ['/usr/bin/git', '/usr/bin/../bin/git', true],
    ['/usr/bin/git', '/usr/local/bin/git', false],
    ['/usr/bin', '/usr/bin/git', false],
  ])('%s vs %s -> %s', (entry, bin, want) => expect(commandEntryMatches(entry, bin)).toBe(want));
});

describe('deny_args', () => {
  const pats = ['push --force', 'push -f'];
  it.each([
    [['push', '--force'], 'push --force'],
    [['--force', 'push'], 'push --force'],
    [['push', 'origin', 'main', '--force'], 'push --force'],
    [['PUSH', '--FORCE'], 'push --force'],
    [['push', '--force=true'], 'push --force'],
    [['push', '--forc'], 'push --force'],
    [['push', '--fo=1'], 'push --force'],
    [['push', '-f'], 'push -f'],
    [['push', '-uf', 'origin'], 'push -f'],
    [['-c', 'x=y', 'push', '-F'], 'push -f'],
  ])('denies %j', (args, hit) => expect(matchDenyArgs(pats, args)).toBe(hit));
  it.each([
    [['push']],
    [['push', 'origin']],
    [['pull', '--force']],
    [['push', '--force-with-lease']],
    [['push', '--', 'f']],
  ])('lets %j through', (args) => expect(matchDenyArgs(pats, args)).toBeNull());
});

describe('judge', () => {
  const decide = localDeciderFactory;

  it('allows an allow entry and names it', () => {
    const p = policy({ allow: ['ls'] });
    const j = judge(['ls', '-la'], at('/usr/bin/ls'), p, decide(p));
    expect(j).toMatchObject({ allowed: true, reason: 'allow_entry', rule: 'ls', binary: '/usr/bin/ls' });
    expect(j.policyReason).toContain("allow entry 'ls'");
  });

  it('denies what is not listed in whitelist mode', () => {
    const p = policy({ allow: ['ls'] });
    expect(judge(['cat'], at('/usr/bin/cat'), p, decide(p))).toMatchObject({ allowed: false, reason: 'not_allowed' });
  });

  it('lets deny win over allow in both modes', () => {
    for (const mode of ['whitelist', 'blacklist'] as const) {
      const p = policy({ mode, allow: ['rm'], deny: ['rm'] });
      expect(judge(['rm', 'x'], at('/usr/bin/rm'), p, decide(p))).toMatchObject({ allowed: false, rule: 'rm' });
    }
  });

  it('treats a different case as a different (unknown) binary', () => {
    const p = policy({ allow: ['git'] });
    expect(judge(['GIT', 'status'], at(null, null), p, decide(p))).toMatchObject({
      allowed: false,
      reason: 'not_allowed',
    });
  });

  it('judges the real file behind a symlink: an allowed name cannot carry a denied file', () => {
    const p = policy({ mode: 'blacklist', deny: ['rm'] });
    const j = judge(['./ls'], at('/jail/ls', '/usr/bin/rm'), p, decide(p));
    expect(j).toMatchObject({ allowed: false, reason: 'deny_entry', binary: '/usr/bin/rm' });
  });

  it('judges the link name too: a denied name cannot hide behind its target', () => {
    const p = policy({ mode: 'blacklist', deny: ['python3'] });
    const j = judge(['python3'], at('/usr/bin/python3', '/usr/bin/python3.11'), p, decide(p));
    expect(j).toMatchObject({ allowed: false, reason: 'deny_entry' });
  });

  it('applies deny_args after the surface allowed, with the operator reason', () => {
    const p = policy({ allow: ['git'], args: { git: { deny_args: ['push --force'], reason: 'rewrites history' } } });
    const j = judge(['git', '--FORCE', 'push'], at('/usr/bin/git'), p, decide(p));
    expect(j).toMatchObject({ allowed: false, reason: 'deny_args', rule: 'git: push --force' });
    expect(j.policyReason).toContain('rewrites history');
    expect(judge(['git', 'push'], at('/usr/bin/git'), p, decide(p)).allowed).toBe(true);
  });

  it('keys deny_args by absolute path as well', () => {
    const p = policy({ allow: ['git'], args: { '/usr/bin/git': { deny_args: ['clean'] } } });
    expect(judge(['git', 'clean', '-fdx'], at('/usr/bin/git'), p, decide(p)).allowed).toBe(false);
  });

  it('admits a basename allow entry only for a binary in the PATH directories', () => {
    const p = policy({ allow: ['ls', '/jail/tool'] });
    const dirs = ['/usr/bin', '/bin'];
    expect(judge(['ls'], at('/usr/bin/ls'), p, decide(p), dirs).allowed).toBe(true);
    // A copy of some other program saved in the jail under an allowed name.
    const copy = judge(['./ls'], at('/jail/ls'), p, decide(p), dirs);
    expect(copy).toMatchObject({ allowed: false, reason: 'not_on_path', rule: 'ls' });
    // A symlink in the jail to the real ls is the real ls.
    expect(judge(['./ls'], at('/jail/ls', '/usr/bin/ls'), p, decide(p), dirs).allowed).toBe(true);
    // A PATH symlink whose target lives elsewhere (alternatives) is still on PATH.
    expect(judge(['ls'], at('/usr/bin/ls', '/usr/lib/alt/ls'), p, decide(p), dirs).allowed).toBe(true);
    // An absolute entry admits a binary outside PATH.
    expect(judge(['./tool'], at('/jail/tool'), p, decide(p), dirs).allowed).toBe(true);
    // Blacklist mode allows by the mode default: no entry to scope.
    const b = policy({ mode: 'blacklist' });
    expect(judge(['./ls'], at('/jail/ls'), b, decide(b), dirs).allowed).toBe(true);
  });

  it('fails closed when there is no policy', () => {
    expect(judge(['ls'], at('/usr/bin/ls'), null, decide(null))).toMatchObject({ allowed: false, reason: 'no_policy' });
  });

  it('turns a throwing engine into a block (engine_error)', () => {
    const boom: CommandDecider = () => {
      throw new Error('x');
    };
    expect(judge(['ls'], at('/usr/bin/ls'), policy({}), boom)).toMatchObject({
      allowed: false,
      reason: 'engine_error',
    });
  });

  it('asks the engine about every candidate path', () => {
    const asked: string[] = [];
    const fake: CommandDecider = (b): Verdict => {
      asked.push(b);
      return { action: 'allow', reason: 'mode_allow', source: 'mode', rule: null };
    };
    judge(['./x'], at('/jail/x', '/usr/bin/true'), policy({}), fake);
    expect(asked.sort()).toEqual(['/jail/x', '/usr/bin/true']);
  });
});
