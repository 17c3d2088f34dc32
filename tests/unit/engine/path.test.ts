import { describe, expect, it } from 'vitest';
import { compilePolicy, decide, normalizePath, pathEntryProblem } from '../../../src/engine/index.js';
import { makePolicy } from './helpers.js';

function allows(entry: string, path: string): boolean {
  const p = compilePolicy(makePolicy({ filesystem: { mode: 'whitelist', allow: [entry], deny: [] } }));
  return decide('filesystem', { path }, p).action === 'allow';
}

describe('path normalisation', () => {
  it.each([
    ['/', '/'],
    ['/home/a', '/home/a'],
    ['/home/a/', '/home/a'],
    ['//home//a', '/home/a'],
    ['/home/./a/.', '/home/a'],
    ['/home/a/../b', '/home/b'],
    ['/home/a/..', '/home'],
    ['/..', '/'],
    ['/../../etc/passwd', '/etc/passwd'],
    ['/home/a/../../../../etc', '/etc'],
    ['/home/.a/..b/...', '/home/.a/..b/...'],
    ['/home/a/.../', '/home/a/...'],
  ])('%s -> %s', (input, out) => {
    expect(normalizePath(input)).toBe(out);
  });

  it.each(['', 'home/a', './a', '~/a'])('%j is not absolute', (input) => {
    expect(normalizePath(input)).toBeNull();
  });
});

describe('path matching: exact and directory prefix', () => {
  it.each([
    ['/home/a', '/home/a', true],
    ['/home/a', '/home/a/x', true],
    ['/home/a', '/home/a/x/y/z', true],
    ['/home/a', '/home/ab', false],
    ['/home/a', '/home/ab/x', false],
    ['/home/a', '/home', false],
    ['/home/a', '/', false],
    ['/home/a/', '/home/a/x', true],
    ['/home//a', '/home/a/x', true],
    ['/', '/anything/at/all', true],
    ['/home/a', '/home/a/../ab', false],
    ['/home/a', '/home/ab/../a/x', true],
    ['/home/a', '//home//a//x', true],
    ['/home/a', '/home/./a', true],
    ['/home/a', '/../home/a', true],
    ['/tmp/x', '/tmp/x/../../etc/passwd', false],
    ['/home/a', '/Home/a', false],
  ])('%s covers %s: %s', (entry, path, expected) => {
    expect(allows(entry, path)).toBe(expected);
  });
});

describe('path matching: globs', () => {
  it.each([
    ['/home/*/work', '/home/u/work', true],
    ['/home/*/work', '/home/u/work/f.txt', true],
    ['/home/*/work', '/home/u/v/work', false],
    ['/home/*/work', '/home/work', false],
    ['/home/**/work', '/home/work', true],
    ['/home/**/work', '/home/u/v/work', true],
    ['/home/**/work', '/home/u/v/works', false],
    ['/etc/*.conf', '/etc/a.conf', true],
    ['/etc/*.conf', '/etc/.conf', true],
    ['/etc/*.conf', '/etc/sub/a.conf', false],
    ['/etc/**.conf', '/etc/sub/a.conf', true],
    ['/data/file?.txt', '/data/file1.txt', true],
    ['/data/file?.txt', '/data/file10.txt', false],
    ['/data/file?.txt', '/data/file/.txt', false],
    ['/data/file?.txt', '/data/fileé.txt', true],
    ['/data/[abc].txt', '/data/b.txt', true],
    ['/data/[abc].txt', '/data/d.txt', false],
    ['/data/[a-c].txt', '/data/b.txt', true],
    ['/data/[!a-c].txt', '/data/b.txt', false],
    ['/data/[!a-c].txt', '/data/z.txt', true],
    ['/data/[^a-c].txt', '/data/z.txt', true],
    ['/data/[]].txt', '/data/].txt', true],
    ['/data/a.b', '/data/aXb', false], // "." is literal, not regex
    ['/data/(x)+', '/data/(x)+', true],
    ['/*', '/etc/passwd', true],
    ['/**', '/', true],
    ['/a/**', '/a', true],
    ['/a/**', '/a/b/c', true],
    ['/a/**', '/ab', false],
    ['/home/*/.ssh', '/home/u/.ssh/id_ed25519', true],
    ['/home/*/.ssh', '/home/u/x/../.ssh/id_ed25519', true],
    ['/home/*/.ssh', '/home/u/.sshx', false],
    ['/x/*', '/x', false],
  ])('%s covers %s: %s', (entry, path, expected) => {
    expect(allows(entry, path)).toBe(expected);
  });
});

describe('path entry grammar', () => {
  it.each(['/', '/home/a', '/home/a/', '/home/*/x', '/a/**', '/data/[a-z]', '/with space/x'])('accepts %j', (e) => {
    expect(pathEntryProblem(e)).toBeNull();
  });
  it.each([
    ['', 'empty'],
    ['home/a', 'relative_path'],
    ['./a', 'relative_path'],
    ['../a', 'relative_path'],
    [' /home/a', 'relative_path'],
    ['*.conf', 'relative_path'],
    ['~/work', 'home_path'],
    ['~fido/work', 'home_path'],
    ['/data/[abc', 'bad_glob'],
    ['/data/[a/b]', 'bad_glob'],
    ['/a\u0000b', 'whitespace'],
  ])('refuses %j as %s', (e, code) => {
    expect(pathEntryProblem(e)?.code).toBe(code);
  });
  it('refuses a non-string', () => {
    expect(pathEntryProblem(null)?.code).toBe('not_a_string');
  });
});

describe('glob cost', () => {
  it('stays fast on a deep attacker-chosen path against ** globs', () => {
    const p = compilePolicy(
      makePolicy({ filesystem: { mode: 'blacklist', allow: [], deny: ['/**/x/**/y/**/z', '/a/**/b/*.key'] } }),
    );
    const deep = '/' + Array.from({ length: 1500 }, () => 'x').join('/') + '/q';
    const t0 = performance.now();
    expect(decide('filesystem', { path: deep }, p).reason).toBe('mode_allow');
    expect(decide('filesystem', { path: '/a' + '/b'.repeat(1500) + '/c' }, p).reason).toBe('mode_allow');
    // Backtracking regexes take seconds here (three ** over a path full of partial matches).
    expect(decide('filesystem', { path: '/x/y'.repeat(1000) + '/q' }, p).reason).toBe('mode_allow');
    expect(decide('filesystem', { path: '/x/y'.repeat(1000) + '/z' }, p).rule).toBe('/**/x/**/y/**/z');
    expect(performance.now() - t0).toBeLessThan(300);
  });
});
