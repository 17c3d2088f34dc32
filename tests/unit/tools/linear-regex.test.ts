/**
 * tools.args patterns and deny_methods globs are matched in time linear in the agent's input
 * (issue 13: `(a+)+$` and a 33-character value kept the gate busy past 20 s). What cannot be
 * matched in linear time is refused when the policy is compiled, so at write and at load.
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../../src/control/config/load.js';
import { ArgRuleError, compileToolArgs } from '../../../src/tools/judge/compile.js';
import { DOTDOT_GUARD } from '../../../src/tools/learn/learn.js';
import { compileLinear, deterministicOf, LinearRegexError } from '../../../src/tools/judge/linear-regex.js';
import { checkTool } from '../../../src/tools/judge/decide.js';
import { compileGatePolicy, globMatcher } from '../../../src/tools/judge/compile.js';
import { GATE_DEFAULTS } from '../../../src/tools/judge/fields.js';
import { GATE_ENGINE } from '../../../src/tools/judge/compile.js';
import { LeashError } from '../../../src/errors.js';
import { mulberry32 } from '../../lab/prng.js';
import { RE2JS } from 're2js';

// A bound no linear matcher comes near on these inputs, and no backtracking one stays under:
// (a+)+$ on 40 characters is 2^40 steps.
const BOUND_MS = 3000;

function timed<T>(f: () => T): { v: T; ms: number } {
  const t0 = performance.now();
  const v = f();
  return { v, ms: performance.now() - t0 };
}

describe('linear-time argument patterns', () => {
  it.each(['(a+)+$', '(a|a)*$', '(a*)*b', '^(\\w+\\s?)*$', '(.*a){20}'])(
    '%s on a hostile value answers within the bound',
    (p) => {
      const re = compileLinear(p);
      for (const text of ['a'.repeat(33) + '!', 'a'.repeat(40) + '!', 'a'.repeat(100_000) + '!']) {
        const { ms } = timed(() => re.test(text));
        expect(ms).toBeLessThan(BOUND_MS);
      }
    },
  );

  it('answers the same as a backtracking engine where that one finishes', () => {
    const rnd = mulberry32(13);
    const pats = [
      '(a+)+$',
      '^a|b$',
      '^(ab|a)*c$',
      'x[0-9]{2,3}y',
      '^[a-c]*$',
      '(?i)^AB',
      '^a.c$',
      '\\Aab\\z',
      'a\\u0062',
    ];
    for (const p of pats) {
      const mine = compileLinear(p);
      const js = new RegExp(
        p.replace('(?i)', '').replace('\\A', '^').replace('\\z', '$'),
        p.startsWith('(?i)') ? 'iu' : 'u',
      );
      for (let k = 0; k < 300; k++) {
        const len = Math.floor(rnd() * 8);
        let s = '';
        for (let i = 0; i < len; i++) s += 'abcxy019\n'[Math.floor(rnd() * 9)];
        expect(mine.test(s), `${p} on ${JSON.stringify(s)}`).toBe(js.test(s));
      }
    }
  });

  it('a literal pattern, read as a string search, answers as RE2 does', () => {
    // compileLinear answers `^lit`, `lit`, `lit$` and `^lit$` of printable ASCII without the
    // automaton; RE2 itself is the reference, on generated patterns and values (Unicode, newlines,
    // lone surrogates, every escaped punctuation character).
    const rnd = mulberry32(43);
    const punct = '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~';
    const pick = (s: string) => s[Math.floor(rnd() * s.length)]!;
    let literal = 0;
    for (let k = 0; k < 1000; k++) {
      let p = rnd() < 0.5 ? '^' : '';
      const n = Math.floor(rnd() * 4);
      for (let i = 0; i < n; i++) {
        const r = rnd();
        if (r < 0.5) p += pick('ab/.e ');
        else if (r < 0.8) p += `\\${pick(punct)}`;
        else p += pick('.+*?|$^\\dwsAzb(');
      }
      if (rnd() < 0.4) p += '$';
      let re: ReturnType<typeof RE2JS.compile>;
      try {
        re = RE2JS.compile(p);
      } catch {
        continue;
      }
      const mine = compileLinear(p);
      if (/^\^?(?:[ab/e ]|\\[!-/:-@[-`{-~])*\$?$/.test(p)) literal++;
      for (let j = 0; j < 40; j++) {
        const len = Math.floor(rnd() * 7);
        let t = '';
        for (let i = 0; i < len; i++) t += pick(`ab/.e \n${punct}\u00e9\ud83d\ude00\udc00`);
        expect(mine.test(t), `${p} on ${JSON.stringify(t)}`).toBe(re.test(t));
      }
    }
    expect(literal).toBeGreaterThan(150);
  });

  it('an anchored pattern of ASCII atoms no repeat can run into goes to JavaScript, answering as RE2 does, in linear time', () => {
    const rnd = mulberry32(44);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
    const atoms = [
      'a',
      'b',
      '/',
      '\\.',
      '\\-',
      '[a-c]',
      '[ab/]',
      '[-a]',
      '[a-]',
      '[/.]',
      '[^a]',
      '[]a]',
      '.',
      '\\d',
      'c',
    ];
    const quants = ['', '', '?', '*', '+', '+?', '{2}'];
    let fast = 0;
    for (let k = 0; k < 1500; k++) {
      let p = rnd() < 0.9 ? '^' : '';
      const n = 1 + Math.floor(rnd() * 4);
      for (let i = 0; i < n; i++) p += pick(atoms) + pick(quants);
      if (rnd() < 0.5) p += '$';
      let re: ReturnType<typeof RE2JS.compile>;
      try {
        re = RE2JS.compile(p);
      } catch {
        continue;
      }
      const js = deterministicOf(p);
      if (js === null) continue;
      fast++;
      const mine = compileLinear(p);
      for (let j = 0; j < 60; j++) {
        const len = Math.floor(rnd() * 8);
        let t = '';
        for (let i = 0; i < len; i++) t += pick([...'abc/.-d1\n', '\u00e9', '\ud83d\ude00', '\udc00']);
        expect(mine.test(t), `${p} on ${JSON.stringify(t)}`).toBe(re.test(t));
      }
      // The hostile values for a backtracking engine: a long run of one character, then a miss.
      for (const ch of 'abc/.-') {
        const hostile = ch.repeat(20_000) + '!';
        const { v, ms } = timed(() => js.test(hostile) === re.test(hostile));
        expect(v, p).toBe(true);
        expect(ms, `${p} on a run of ${ch}`).toBeLessThan(BOUND_MS);
      }
    }
    expect(fast).toBeGreaterThan(100);
    // The shapes a learned or written allow rule takes go the fast way; the ambiguous ones do not.
    expect(deterministicOf('^/srv/[a-z/]+\\.txt$')).not.toBeNull();
    expect(deterministicOf('^[a-z]*[a-z]*x')).toBeNull();
    expect(deterministicOf('^a*a')).toBeNull();
    expect(deterministicOf('a+b')).toBeNull();
  });

  it('a quadratic pattern for a backtracking engine stays with RE2', () => {
    for (const p of [
      '^[a-z]*[a-z]*[a-z]*[a-z]*[a-z]*!',
      '^(a|a)*$',
      '^a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?aaaaaaaaaaaaaaaaaaaaaa$',
    ]) {
      expect(deterministicOf(p), p).toBeNull();
      const { ms } = timed(() => compileLinear(p).test('a'.repeat(50_000)));
      expect(ms).toBeLessThan(BOUND_MS);
    }
  });

  it('the leading ^(?!G) guard learn writes means what it meant', () => {
    const p = `^${DOTDOT_GUARD}\\/tmp\\/[a-zA-Z0-9_/.-]*$`;
    const mine = compileLinear(p);
    const js = new RegExp(p, 'u');
    for (const s of ['/tmp/a', '/tmp/../etc', '/tmp/a/..', '/tmp/..a', '/tmp/a..b', '/etc/x', '/tmp/x/../y', '..'])
      expect(mine.test(s), s).toBe(js.test(s));
  });

  it.each([
    ['(\\w)\\1', 'backreference'],
    ['(?<n>a)\\k<n>', 'named backreference'],
    ['a(?=b)', 'lookahead'],
    ['a(?!b)', 'negative lookahead not leading'],
    ['(?<=a)b', 'lookbehind'],
    ['(?<!a)b', 'negative lookbehind'],
    ['^(?!a)(?!b)c', 'a second guard'],
    ['[', 'a bad regex'],
  ])('%s (%s) is refused at compile', (p) => {
    expect(() => compileLinear(p)).toThrow(LinearRegexError);
    expect(() => compileToolArgs({ deny: { path: [p] } }, 'tools.args.t')).toThrow(ArgRuleError);
  });

  it('a pattern that cannot be matched in linear time is config_invalid at load, naming the rule', () => {
    try {
      parseConfig('tools:\n  args:\n    run:\n      deny:\n        cmd: ["(a)\\\\1"]\n', 't.yaml', {
        lookup: () => null,
      });
      expect.unreachable();
    } catch (e) {
      expect((e as LeashError).code).toBe('config_invalid');
      const issues = (e as LeashError).details!.issues as { path: string; message: string }[];
      expect(issues[0]!.path).toBe('tools.args.run.deny.cmd[0]');
      expect(issues[0]!.message).toContain('linear time');
    }
  });

  it('the gate judges (a+)+$ against a hostile argument within the bound', () => {
    const policy = compileGatePolicy(
      {
        mode: 'whitelist',
        allow: ['run'],
        deny: [],
        inspect: { secrets: 'allow', pii: 'allow', priv_esc: 'allow' },
        ...GATE_DEFAULTS,
        args: { run: { deny: { cmd: ['(a+)+$'] } } },
      },
      'closed',
      GATE_ENGINE,
    );
    const { v, ms } = timed(() => checkTool('run', { cmd: 'a'.repeat(33) + '!' }, policy));
    expect(v.action).toBe('allow');
    expect(ms).toBeLessThan(BOUND_MS);
    expect(checkTool('run', { cmd: 'aaaa' }, policy)).toMatchObject({ action: 'block', reason: 'arg_denied' });
  });
});

describe('deny_methods globs without backtracking', () => {
  it('agrees with the glob read as a regex', () => {
    const rnd = mulberry32(7);
    for (let g = 0; g < 200; g++) {
      let glob = '';
      for (let i = 0, n = Math.floor(rnd() * 6); i < n; i++) glob += 'ab*?/'[Math.floor(rnd() * 5)];
      const re = new RegExp(`^${glob.replace(/\*/g, '.*').replace(/\?/g, '.')}$`, 'su');
      const m = globMatcher(glob);
      for (let k = 0; k < 50; k++) {
        let s = '';
        for (let i = 0, n = Math.floor(rnd() * 7); i < n; i++) s += 'ab/\n'[Math.floor(rnd() * 4)];
        expect(m.test(s), `${glob} on ${JSON.stringify(s)}`).toBe(re.test(s));
      }
    }
  });

  it('a many-star glob on a long hostile method answers within the bound', () => {
    const m = globMatcher('*a*a*a*a*a*a*b');
    const { v, ms } = timed(() => m.test('a'.repeat(50_000)));
    expect(v).toBe(false);
    expect(ms).toBeLessThan(BOUND_MS);
  });
});
