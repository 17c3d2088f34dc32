// Differential tests: the indexed matchers against the plainest possible reference
// implementation of the documented semantics, over generated lists and subjects drawn from a
// small alphabet (so shared suffixes, prefixes, collisions in the trie and '..' games are common).
import { describe, expect, it } from 'vitest';
import { compilePolicy, decide, type Surface, type SubjectOf } from '../../../src/engine/index.js';
import { makePolicy } from './helpers.js';
import { mulberry32 as rng } from '../../lab/prng.js';

const pick = <T>(r: () => number, a: readonly T[]): T => a[Math.floor(r() * a.length)]!;
const many = <T>(r: () => number, n: number, f: () => T): T[] => Array.from({ length: n }, f);

/** Checks decide() against a reference "does entry e match subject s" over one list per case. */
function differential<S extends Surface>(
  surface: S,
  seed: number,
  gen: (r: () => number) => { entries: string[]; subjects: SubjectOf[S][] },
  matches: (entry: string, s: SubjectOf[S]) => boolean,
): void {
  const r = rng(seed);
  for (let round = 0; round < 60; round++) {
    const { entries, subjects } = gen(r);
    const allow = entries.filter((_, i) => i % 3 !== 0);
    const deny = entries.filter((_, i) => i % 3 === 0);
    const p = compilePolicy(makePolicy({ [surface]: { mode: 'whitelist', allow, deny } }));
    for (const s of subjects) {
      const v = decide(surface, s, p);
      const denied = deny.filter((e) => matches(e, s));
      const allowed = allow.filter((e) => matches(e, s));
      const where = `${JSON.stringify(s)} allow=${JSON.stringify(allow)} deny=${JSON.stringify(deny)}`;
      if (denied.length > 0) {
        expect(v.reason, where).toBe('deny_entry');
        expect(denied, where).toContain(v.rule);
      } else if (allowed.length > 0) {
        expect(v.reason, where).toBe('allow_entry');
        expect(allowed, where).toContain(v.rule);
      } else {
        expect(v.reason, where).toBe('not_allowed');
      }
    }
  }
}

describe('indexed matchers agree with a reference implementation', () => {
  it('domains', () => {
    const labels = ['a', 'b', 'ab', 'ba', 'c', 'A'];
    const name = (r: () => number, n: number) => many(r, n, () => pick(r, labels)).join('.');
    differential(
      'network',
      1,
      (r) => ({
        entries: many(r, 12, () => {
          const host = (r() < 0.3 ? '*.' : '') + name(r, 1 + Math.floor(r() * 3)) + (r() < 0.1 ? '.' : '');
          return r() < 0.3 ? `${host}:${pick(r, [80, 443])}` : host;
        }),
        subjects: many(r, 40, () => ({ domain: name(r, 1 + Math.floor(r() * 4)), port: pick(r, [80, 443]) })),
      }),
      (entry, s) => {
        const m = /^(\*\.)?(.*?)\.?(?::(\d+))?$/.exec(entry)!;
        if (m[3] !== undefined && Number(m[3]) !== s.port) return false;
        const d = m[2]!.toLowerCase();
        const name = s.domain!.toLowerCase();
        return (m[1] === undefined && name === d) || name.endsWith('.' + d);
      },
    );
  });

  it('IPv4 CIDRs (also as IPv4-mapped IPv6 subjects)', () => {
    const addr = (r: () => number) => (10 << 24) | Math.floor(r() * 65536);
    const dotted = (a: number) => [a >>> 24, (a >>> 16) & 255, (a >>> 8) & 255, a & 255].join('.');
    differential(
      'network',
      2,
      (r) => ({
        entries: many(r, 10, () => {
          const len = 16 + Math.floor(r() * 17);
          const mask = len === 32 ? 0xffffffff : ~(0xffffffff >>> len);
          return `${dotted((addr(r) & mask) >>> 0)}/${len}`;
        }),
        subjects: many(r, 40, () => {
          // Subjects near the entries' networks: flip a few low bits of a 10.0/16 address.
          const ip = dotted(addr(r) & (r() < 0.5 ? 0xffffff00 : 0xffffffff));
          return { ip: r() < 0.3 ? `::ffff:${ip}` : ip, port: 443 };
        }),
      }),
      (entry, s) => {
        const [net, len] = entry.split('/') as [string, string];
        const toInt = (t: string) => t.split('.').reduce((a, x) => a * 256 + Number(x), 0);
        const mask = Number(len) === 0 ? 0 : (0xffffffff << (32 - Number(len))) >>> 0;
        return (toInt(s.ip!.replace('::ffff:', '')) & mask) >>> 0 === toInt(net);
      },
    );
  });

  const normalize = (p: string): string => {
    const out: string[] = [];
    for (const seg of p.split('/')) {
      if (seg === '..') out.pop();
      else if (seg !== '' && seg !== '.') out.push(seg);
    }
    return '/' + out.join('/');
  };

  it('plain paths (exact and directory prefix, after normalisation)', () => {
    const segs = ['a', 'b', 'ab', 'a.b', '.', '..', ''];
    const path = (r: () => number, n: number) => '/' + many(r, n, () => pick(r, segs)).join('/');
    differential(
      'filesystem',
      3,
      (r) => ({
        entries: many(r, 10, () => path(r, 1 + Math.floor(r() * 3))),
        subjects: many(r, 40, () => ({ path: path(r, 1 + Math.floor(r() * 5)) })),
      }),
      (entry, s) => {
        const e = normalize(entry);
        const p = normalize(s.path);
        return e === '/' || p === e || p.startsWith(e + '/');
      },
    );
  });

  it('commands (basename or exact normalised path)', () => {
    const names = ['ls', 'l', 'sl', 'ls.x', 'curl'];
    const dirs = ['/bin', '/usr/bin', '/usr//bin', '/usr/x/../bin', '/tmp'];
    differential(
      'commands',
      4,
      (r) => ({
        entries: many(r, 6, () => (r() < 0.5 ? pick(r, names) : `${pick(r, dirs)}/${pick(r, names)}`)),
        subjects: many(r, 30, () => ({ binary: `${pick(r, dirs)}/${pick(r, names)}` })),
      }),
      (entry, s) => {
        const b = normalize(s.binary);
        return entry.includes('/') ? normalize(entry) === b : b.slice(b.lastIndexOf('/') + 1) === entry;
      },
    );
  });
});

describe('glob matcher agrees with the RegExp statement of the same glob', () => {
  it('on generated globs and paths', async () => {
    const { parseGlob, matchGlob, normalizePath } = await import('../../../src/engine/index.js');
    const { compileGlob } = await import('./fixtures/glob-regexp.js');
    const r = rng(5);
    const atoms = ['a', 'b', '.', '*', '**', '?', '[ab]', '[!a]', '[a-c]', 'é', '𝒳'];
    const chars = ['a', 'b', 'c', '.', 'é', '𝒳'];
    let compared = 0;
    for (let g = 0; g < 400; g++) {
      const glob = normalizePath(
        '/' +
          many(r, 1 + Math.floor(r() * 4), () => many(r, 1 + Math.floor(r() * 3), () => pick(r, atoms)).join('')).join(
            '/',
          ),
      )!;
      const re = compileGlob(glob);
      const tokens = parseGlob(glob);
      if (!(re instanceof RegExp) || !Array.isArray(tokens)) continue;
      for (let k = 0; k < 40; k++) {
        const path = normalizePath(
          '/' +
            many(r, 1 + Math.floor(r() * 5), () =>
              many(r, 1 + Math.floor(r() * 3), () => pick(r, chars)).join(''),
            ).join('/'),
        )!;
        expect(matchGlob(tokens, path), `${glob} vs ${path}`).toBe(re.test(path));
        compared++;
      }
    }
    expect(compared).toBeGreaterThan(10_000);
  });
});
