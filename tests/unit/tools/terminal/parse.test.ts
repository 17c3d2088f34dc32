import { describe, expect, it } from 'vitest';
import { parseCommandLine } from '../../../../src/tools/terminal/parse.js';

describe('terminal parser', () => {
  it.each([
    ['ls -la', ['ls', '-la']],
    ['git   push\t--force', ['git', 'push', '--force']],
    ['  echo  hi  ', ['echo', 'hi']],
    [`echo 'a b' "c d"`, ['echo', 'a b', 'c d']],
    [`echo "say \\"hi\\"" 'it''s'`, ['echo', 'say "hi"', 'its']],
    [`echo a\\ b`, ['echo', 'a b']],
    [`echo "" x`, ['echo', '', 'x']],
    [`git "push" '--force'`, ['git', 'push', '--force']],
    [`echo $HOME *.txt ~`, ['echo', '$HOME', '*.txt', '~']],
    [`echo "a\\b"`, ['echo', 'a\\b']],
  ])('splits %j into argv', (line, argv) => {
    expect(parseCommandLine(line)).toEqual({ ok: true, argv });
  });

  it.each([
    'echo a; rm -rf /',
    'echo a && rm x',
    'echo a || rm x',
    'cat x | sh',
    'sleep 1 &',
    'echo a > /etc/passwd',
    'cat < /etc/shadow',
    'echo `id`',
    'echo $(id)',
    'echo ${HOME}',
    'echo a\nrm -rf /',
    'echo a\rrm',
    "echo 'a;b'",
    'echo "$(id)"',
    'echo a\u0000b',
    'echo a\u001bb',
    'git\u00a0push',
    'git push\u200b--force',
    'echo a\u2028b',
    'echo "unterminated',
    "echo 'unterminated",
    'echo trailing\\',
    '',
    '   ',
    `'' arg`,
  ])('refuses %j before any policy check', (line) => {
    const r = parseCommandLine(line);
    expect(r.ok).toBe(false);
  });

  it('names the metacharacter it refused', () => {
    const r = parseCommandLine('ls | sh');
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.reason).toContain("'|'");
  });

  it('refuses over-long lines', () => {
    expect(parseCommandLine('echo ' + 'a'.repeat(20_000)).ok).toBe(false);
  });
});
