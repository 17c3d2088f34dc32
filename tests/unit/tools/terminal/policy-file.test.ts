import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  loadTerminalPolicy,
  TerminalPolicyError,
  validateTerminalPolicy,
} from '../../../../src/tools/terminal/policy-file.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-term-pf-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function problems(doc: unknown): string[] {
  try {
    validateTerminalPolicy(doc);
    return [];
  } catch (e) {
    return (e as TerminalPolicyError).problems;
  }
}

describe('terminal policy file', () => {
  it('reads the commands section of a Leash config, with args', () => {
    const f = path.join(dir, 'p.yaml');
    fs.writeFileSync(
      f,
      [
        'network: { mode: whitelist, allow: [github.com], deny: [] }',
        'commands:',
        '  mode: whitelist',
        '  allow: [ls, git, /usr/bin/cat]',
        '  deny: [rm]',
        '  args:',
        '    git: { deny_args: ["push --force", "push -f"], reason: "shared history" }',
      ].join('\n'),
    );
    expect(loadTerminalPolicy(f)).toEqual({
      fail_mode: 'closed',
      commands: {
        mode: 'whitelist',
        allow: ['ls', 'git', '/usr/bin/cat'],
        deny: ['rm'],
        args: { git: { deny_args: ['push --force', 'push -f'], reason: 'shared history' } },
      },
    });
  });

  it('defaults to whitelist (deny by default)', () => {
    expect(validateTerminalPolicy({ commands: {} }).commands.mode).toBe('whitelist');
  });

  it.each([
    [{}, 'commands'],
    [{ commands: { mode: 'greylist' } }, 'commands.mode'],
    [{ commands: { denny: ['rm'] } }, 'commands.denny'],
    [{ commands: { deny: ['bin/rm'] } }, 'commands.deny[0]'],
    [{ commands: { allow: ['git push'] } }, 'commands.allow[0]'],
    [{ commands: { args: { git: { deny_args: 'push' } } } }, 'commands.args.git.deny_args'],
    [{ commands: { args: { git: { deny: ['push'] } } } }, 'commands.args.git.deny'],
    [{ commands: { args: { git: { deny_args: ['  '] } } } }, 'commands.args.git.deny_args[0]'],
    [{ fail_mode: 'maybe', commands: {} }, 'fail_mode'],
  ])('refuses %j naming %s', (doc, where) => {
    expect(problems(doc).some((p) => p.startsWith(where))).toBe(true);
  });

  it('tells a missing file from an invalid one', () => {
    expect(() => loadTerminalPolicy(path.join(dir, 'none.yaml'))).toThrow(expect.objectContaining({ kind: 'missing' }));
    const bad = path.join(dir, 'bad.yaml');
    fs.writeFileSync(bad, 'commands: [');
    expect(() => loadTerminalPolicy(bad)).toThrow(expect.objectContaining({ kind: 'invalid' }));
  });
});
