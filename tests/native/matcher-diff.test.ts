// One engine: the watcher's native matcher must give the TypeScript engine's verdict
// (action, reason, rule) for every filesystem and commands case: a fixed corpus of the
// grammar's corners plus >= 100,000 generated cases from a fixed seed.
import { describe, expect, it } from 'vitest';
import { compilePolicy, decide } from '../../src/engine/index.js';
import type { FailMode, Mode, PolicyInput } from '../../src/engine/types.js';
import { loadNative, nativeAvailable, type FsCmdPolicy } from '../../src/native.js';
import { mulberry32 as rng } from '../lab/prng.js';

type Kind = 'filesystem' | 'commands' | 'interpreter';
interface Case {
  kind: Kind;
  subject: string;
}

function policyInput(p: FsCmdPolicy): PolicyInput {
  const empty = { mode: 'whitelist' as Mode, allow: [], deny: [] };
  return {
    fail_mode: p.fail_mode,
    network: empty,
    filesystem: p.filesystem,
    commands: p.commands,
    tools: { ...empty, inspect: { secrets: 'block', pii: 'log', priv_esc: 'block' } },
  };
}

function tsVerdicts(p: FsCmdPolicy | null, cases: Case[], failMode: FailMode): string[] {
  const compiled = p ? compilePolicy(policyInput(p)) : null;
  return cases.map((c) => {
    const v =
      c.kind === 'filesystem'
        ? decide('filesystem', { path: c.subject }, compiled, { failMode })
        : c.kind === 'interpreter'
          ? decide('commands', { binary: c.subject, interpreterOf: '/usr/bin/prog' }, compiled, { failMode })
          : decide('commands', { binary: c.subject }, compiled, { failMode });
    return `${v.action}|${v.reason}|${v.rule ?? '\u0001null'}`;
  });
}

function nativeVerdicts(p: FsCmdPolicy | null, cases: Case[], failMode: FailMode): string[] {
  const n = loadNative();
  const h = p ? n.compileFsPolicy(p) : null;
  return n.nativeMatchBatch(
    h,
    cases.map((c) => c.kind),
    cases.map((c) => c.subject),
    failMode,
  );
}

function compare(p: FsCmdPolicy | null, cases: Case[], failMode: FailMode = 'closed'): void {
  const ts = tsVerdicts(p, cases, failMode);
  const nat = nativeVerdicts(p, cases, failMode);
  for (let i = 0; i < cases.length; i++) {
    if (ts[i] !== nat[i]) {
      // One readable failure with the whole case, rather than 100,000 lines.
      expect({ policy: p, case: cases[i], native: nat[i] }).toEqual({ policy: p, case: cases[i], native: ts[i] });
    }
  }
}

function pol(
  fs: [Mode, string[], string[]],
  cmd: [Mode, string[], string[], string[]?] = ['blacklist', [], []],
  failMode: FailMode = 'closed',
): FsCmdPolicy {
  return {
    fail_mode: failMode,
    filesystem: { mode: fs[0], allow: fs[1], deny: fs[2] },
    commands: { mode: cmd[0], allow: cmd[1], deny: cmd[2], ...(cmd[3] ? { interpreters: cmd[3] } : {}) },
  };
}

const f = (subject: string): Case => ({ kind: 'filesystem', subject });
const c = (subject: string): Case => ({ kind: 'commands', subject });
const ic = (subject: string): Case => ({ kind: 'interpreter', subject });

const PATH_SEGS = [
  'a',
  'b',
  'ab',
  'abc',
  'a.b',
  '.ssh',
  'x',
  'home',
  'etc',
  '.',
  '..',
  '',
  'é',
  '日本',
  'a b',
  '*',
  '-',
  ']',
];
const GLOB_SEGS = [
  '*',
  '**',
  '***',
  'a*',
  '*b',
  'a**b',
  '?',
  'a?',
  '[ab]',
  '[!a]',
  '[^b]',
  '[a-c]',
  '[]a]',
  '[z-a]',
  '[a-]',
  '[-a]',
  '[a-c-e]',
  '[',
  '[é-ü]',
  '*.b',
  '?*',
];
const WEIRD = ['\n', '\r', '\u2028', ' ', '~', 'ü'];
const NAMES = [
  'ls',
  'cat',
  'sh',
  'bash',
  'python3',
  'ld-linux-x86-64.so.2',
  'env',
  'a',
  'b',
  '.',
  '..',
  '*',
  'a b',
  '~x',
  '',
];

function genPath(r: () => number, glob: boolean): string {
  const depth = 1 + Math.floor(r() * 5);
  let s = r() < 0.05 ? '' : '/';
  for (let i = 0; i < depth; i++) {
    if (i > 0) s += r() < 0.05 ? '//' : '/';
    const pool = glob && r() < 0.35 ? GLOB_SEGS : PATH_SEGS;
    s += pool[Math.floor(r() * pool.length)]!;
    if (r() < 0.03) s += WEIRD[Math.floor(r() * WEIRD.length)]!;
  }
  if (r() < 0.05) s += '/';
  if (r() < 0.02) s = '~' + s;
  return s;
}

function genCommand(r: () => number): string {
  const x = r();
  if (x < 0.45) return NAMES[Math.floor(r() * NAMES.length)]!;
  if (x < 0.9) return genPath(r, false) + (r() < 0.5 ? '/' + NAMES[Math.floor(r() * NAMES.length)]! : '');
  return 'bin/' + NAMES[Math.floor(r() * NAMES.length)]!;
}

function genList(r: () => number, n: number, gen: () => string): string[] {
  return Array.from({ length: Math.floor(r() * n) }, gen);
}

describe.skipIf(!nativeAvailable())('native matcher = TypeScript engine', () => {
  it('agrees on the fixed corpus', () => {
    const cases = [
      f('/home/a'),
      f('/home/a/x'),
      f('/home/ab'),
      f('/home/a/../ab'),
      f('/home//a/./x/'),
      f('/../../home/a'),
      f('home/a'),
      f(''),
      f('/'),
      f('/home/u/.ssh/id_ed25519'),
      f('/home/u/x/.ssh'),
      f('/srv/a/b/c/log'),
      f('/srv/log'),
      f('/srv/a.log'),
      f('/srv/x/y.log\nz'),
      f('/data/f1'),
      f('/data/fz'),
      f('/data/f9/x'),
      f('/tmp/日本/ü'),
      c('/usr/bin/ls'),
      c('/opt/x/ls'),
      c('/usr/bin/../bin/cat'),
      c('ls'),
      c('bin/ls'),
      c(''),
      c('/'),
      c('/usr/bin/python3'),
      c('/lib64/ld-linux-x86-64.so.2'),
      c('/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2'),
      ic('/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2'),
      ic('/usr/lib/x86_64-linux-gnu/../x86_64-linux-gnu/ld-linux-x86-64.so.2'),
      ic('/lib64/ld-linux-x86-64.so.2'),
      ic('ld-linux-x86-64.so.2'),
      ic('/usr/bin/ls'),
      ic('/usr/bin/python3'),
      ic('/bin/sh'),
      c('/bin/sh'),
      ic(''),
      ic('bin/sh'),
    ];
    const policies = [
      pol(
        ['whitelist', ['/home/a', '/srv/**/log', '/data/f[0-9]', '/tmp/*/ü'], ['/home/*/.ssh']],
        ['whitelist', ['ls', '/usr/bin/cat', 'python3'], ['/usr/bin/python3']],
      ),
      pol(['blacklist', ['/home'], ['/home/a', '/srv/*.log', '/']], ['blacklist', ['ls'], ['ls', 'bin/x', '~y']]),
      pol(['whitelist', ['/', '/home/a/x', '/home'], []], ['whitelist', ['/usr/bin/ls', 'ls'], []], 'open'),
      pol(['whitelist', ['relative', '~/x', '', '/bad[', '/r[z-a]'], ['/home/a[']]),
      // commands.interpreters: implied only as an allowed program's interpreter, never run directly.
      pol(
        ['whitelist', ['/'], []],
        [
          'whitelist',
          ['/usr/bin/ls', 'ld-linux-x86-64.so.2', '/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2'],
          ['/usr/bin/python3'],
          ['/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2', '/bin/sh', '/usr/bin/python3', 'sh', 'relative/x', ''],
        ],
      ),
      pol(['whitelist', ['/'], []], ['blacklist', [], ['/bin/sh'], ['/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2']]),
      pol(['whitelist', ['/'], []], ['whitelist', ['sh'], [], ['/bin/../bin/sh', '/a b']], 'open'),
    ];
    for (const p of policies) compare(p, cases);
    compare(null, cases, 'closed');
    compare(null, cases, 'open');
  });

  it('gives the expected verdicts on the grammar corners (both sides)', () => {
    const n = loadNative();
    const h = n.compileFsPolicy(pol(['whitelist', ['/home/a', '/srv/**/log'], ['/home/*/.ssh']]));
    expect(n.nativeMatch(h, 'filesystem', '/home/ab')).toMatchObject({ action: 'block', reason: 'not_allowed' });
    expect(n.nativeMatch(h, 'filesystem', '/home/a/x')).toMatchObject({ action: 'allow', rule: '/home/a' });
    expect(n.nativeMatch(h, 'filesystem', '/home/a/.ssh/k')).toMatchObject({ action: 'block', reason: 'deny_entry' });
    expect(n.nativeMatch(h, 'filesystem', '/srv/log')).toMatchObject({ action: 'allow', rule: '/srv/**/log' });
    expect(n.nativeMatch(h, 'filesystem', '/srv/a/b/log/x')).toMatchObject({ action: 'allow' });
    expect(n.nativeMatch(h, 'filesystem', '/home/b/../a/f')).toMatchObject({ action: 'allow' });
    expect(n.nativeMatch(h, 'filesystem', 'home/a')).toMatchObject({ action: 'block', reason: 'engine_error' });
  });

  it('allows a commands.interpreters entry only as an interpreter, never run directly (both sides)', () => {
    const n = loadNative();
    const ld = '/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2';
    const p = pol(['whitelist', ['/'], []], ['whitelist', ['/usr/bin/ls', ld], [], [ld]]);
    const h = n.compileFsPolicy(p);
    expect(n.nativeMatch(h, 'interpreter', ld)).toMatchObject({ action: 'allow', reason: 'interpreter_of', rule: ld });
    expect(n.nativeMatch(h, 'commands', ld)).toMatchObject({ action: 'block', reason: 'interpreter_direct', rule: ld });
    expect(n.nativeMatch(h, 'interpreter', '/usr/bin/cat')).toMatchObject({ action: 'block', reason: 'not_allowed' });
    const b = n.compileFsPolicy(pol(['whitelist', ['/'], []], ['blacklist', [], [], [ld]]));
    expect(n.nativeMatch(b, 'commands', ld)).toMatchObject({ action: 'allow', reason: 'mode_allow' });
    compare(p, [ic(ld), c(ld), ic('/usr/bin/cat'), c('/usr/bin/ls')]);
  });

  it('matches a deep, agent-made path against many ** in linear time (no backtracking)', () => {
    const p = pol(['whitelist', ['/a/**/**/**/**/**/**/**/**/**/**/z*q'], []]);
    const deep = '/a/' + 'b/'.repeat(1500) + 'zzzzzzzzzzzzzzzzzzzz';
    const t0 = Date.now();
    compare(p, [f(deep), f(deep + 'q'), f(deep + 'q/x')]);
    expect(nativeVerdicts(p, [f(deep + 'q')], 'closed')[0]).toMatch(/^allow\|allow_entry/);
    expect(Date.now() - t0).toBeLessThan(2000);
  });

  it('agrees on 100,000+ generated cases (seed 20261130)', () => {
    const r = rng(20261130);
    let total = 0;
    const modes: Mode[] = ['whitelist', 'blacklist'];
    for (let k = 0; k < 1000; k++) {
      const p = pol(
        [modes[Math.floor(r() * 2)]!, genList(r, 12, () => genPath(r, true)), genList(r, 6, () => genPath(r, true))],
        [
          modes[Math.floor(r() * 2)]!,
          genList(r, 8, () => genCommand(r)),
          genList(r, 4, () => genCommand(r)),
          r() < 0.5 ? genList(r, 4, () => genCommand(r)) : undefined,
        ],
        r() < 0.2 ? 'open' : 'closed',
      );
      const cases: Case[] = [];
      for (let i = 0; i < 110; i++) {
        const x = r();
        cases.push(x < 0.6 ? f(genPath(r, r() < 0.1)) : x < 0.85 ? c(genCommand(r)) : ic(genCommand(r)));
      }
      // Subjects built from the policy's own entries hit the matching paths, not only misses.
      for (const e of [...p.filesystem.allow, ...p.filesystem.deny]) {
        cases.push(f(e.replace(/[*?[\]]/g, 'a')), f(e + '/x'));
      }
      for (const e of [...p.commands.allow, ...p.commands.deny]) cases.push(c(e.includes('/') ? e : '/opt/' + e));
      for (const e of p.commands.interpreters ?? []) cases.push(c(e), ic(e), ic(e.includes('/') ? e : '/opt/' + e));
      compare(p, cases);
      total += cases.length;
    }
    expect(total).toBeGreaterThanOrEqual(100_000);
  });
});
