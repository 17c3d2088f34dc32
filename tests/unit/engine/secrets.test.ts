/**
 * The one secret detector set (src/engine/secrets.ts): findSecrets' span contract, and that
 * rewriting (findSecrets) hides everything judging (the engine's precise detectors) finds and
 * everything the terminal's own patterns hid before they became a formatter over it
 * (fixtures/terminal-redact-reference.ts), on generated text full of secret-like material.
 */
import { describe, expect, it } from 'vitest';
import { findSecrets, SECRET_KINDS } from '../../../src/engine/index.js';
import type { Span } from '../../../src/engine/detect.js';
import { SECRET_DETECTORS } from '../../../src/engine/secrets.js';
import { mulberry32 as prng } from '../../lab/prng.js';
import { referenceSpans } from './fixtures/terminal-redact-reference.js';

// Secret-shaped test values are assembled from parts so no scanner mistakes this file for a leak.
const j = (...parts: string[]): string => parts.join('');
const AWS = j('AKIA', 'IOSFODNN7EXAMPLE');

describe('findSecrets', () => {
  it('names the sensitive part only, sorted and without overlaps', () => {
    const text = `id ${AWS} password=hunter2hunter2 Authorization: Bearer ${'a'.repeat(20)} x`;
    const spans = findSecrets(text);
    expect(spans.map((s) => [s.kind, text.slice(s.start, s.end)])).toEqual([
      ['aws_access_key', AWS],
      ['credential_assignment', 'hunter2hunter2'],
      ['bearer_token', 'a'.repeat(20)],
    ]);
  });

  it('merges overlapping matches into one span, the kind listed first winning', () => {
    const token = j('ghp_', 'a'.repeat(36));
    const text = `token=${token}`;
    expect(findSecrets(text)).toEqual([{ start: 6, end: text.length, kind: 'github_token' }]);
  });

  it('finds a secret glued to neighbouring text (rewriting prefers recall)', () => {
    const text = 'x'.repeat(5) + AWS + 'y'.repeat(5);
    expect(findSecrets(text)).toEqual([{ start: 5, end: 5 + AWS.length, kind: 'aws_access_key' }]);
  });

  it('names only kinds in SECRET_KINDS, and finds nothing in ordinary text', () => {
    expect(new Set(SECRET_KINDS).size).toBe(SECRET_KINDS.length);
    for (const t of [
      '/usr/bin/git',
      'da39a3ee5e6b4b0d3255bfef95601890afd80709',
      'risk-assessment-document-for-2024',
      '',
    ])
      expect(findSecrets(t)).toEqual([]);
  });
});

const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const FRAGMENTS = [
  '-----BEGIN RSA PRIVATE KEY-----',
  '-----BEGIN OPENSSH PRIVATE KEY-----',
  '-----END RSA PRIVATE KEY-----',
  'AKIA',
  'ASIA',
  'AGPA',
  'AIDA',
  'AROA',
  'ANPA',
  'ghp_',
  'ghr_',
  'github_pat_',
  'glpat-',
  'xoxb-',
  'xoxr-',
  'sk_live_',
  'sk_test_',
  'rk_test_',
  'sk-',
  'sk-proj-',
  'sk-ant-',
  'AIza',
  'eyJ',
  'Bearer ',
  'bearer ',
  'https://',
  'x://',
  'user:',
  '@',
  'password=',
  'password = ',
  'passwd:',
  'pwd=',
  'secret: ',
  'token=',
  'api_key=',
  'api-key: ',
  'access_key=',
  'client_secret=',
  'aws_secret_access_key=',
  'aws_secret_access_key = "',
  '"',
  "'",
  ' ',
  '\t',
  '\n',
  '-',
  '_',
  '.',
  ',',
  ';',
  '/',
  '=',
  ':',
];

function generator(r: () => number): () => string {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const run = (alphabet: string, min: number, max: number) => {
    let s = '';
    const n = min + Math.floor(r() * (max - min + 1));
    for (let i = 0; i < n; i++) s += alphabet[Math.floor(r() * alphabet.length)];
    return s;
  };
  const piece = (): string => {
    const k = r();
    if (k < 0.5) return pick(FRAGMENTS);
    if (k < 0.7) return run(ALNUM, 1, 48);
    if (k < 0.8) return run('ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789', 14, 18);
    if (k < 0.9) return run(ALNUM + '-_', 30, 60);
    return run(ALNUM + ' ./-_@:=+/', 1, 20);
  };
  return () => {
    let s = '';
    const n = 1 + Math.floor(r() * 8);
    for (let i = 0; i < n; i++) s += piece();
    return s;
  };
}

/** The spans of `inner` not inside any span of `outer` (both as [start, end) ranges of one text). */
function uncovered(inner: readonly { start: number; end: number }[], outer: readonly { start: number; end: number }[]) {
  return inner.filter((s) => {
    for (let i = s.start; i < s.end; i++) if (!outer.some((o) => o.start <= i && i < o.end)) return true;
    return false;
  });
}

/**
 * What the terminal's own patterns hid, less the `=` of a `:=` separator (its assignment pattern
 * took `:` as the separator and `=` into the value), which was never secret.
 */
function terminalSpans(text: string): { start: number; end: number }[] {
  return referenceSpans(text).map((s) =>
    s.kind === 'assignment' && text[s.start] === '=' && text[s.start - 1] === ':' ? { ...s, start: s.start + 1 } : s,
  );
}

describe('rewriting hides at least what judging finds and what the terminal hid before', () => {
  it('on 20,000 generated strings', () => {
    const next = generator(prng(11));
    let hidden = 0;
    for (let i = 0; i < 20_000; i++) {
      const text = next();
      const spans = findSecrets(text);
      if (spans.length > 0) hidden++;
      for (let k = 1; k < spans.length; k++) expect(spans[k]!.start).toBeGreaterThanOrEqual(spans[k - 1]!.end);
      const judged: Span[] = [];
      for (const d of SECRET_DETECTORS) d.find(text, judged);
      // A judged match covers its name or scheme too; the span is its sensitive part, inside it.
      for (const s of judged)
        expect(
          spans.some((o) => o.start < s.end && s.start < o.end),
          `${s.detector} in ${JSON.stringify(text)}`,
        ).toBe(true);
      expect(uncovered(terminalSpans(text), spans), JSON.stringify(text)).toEqual([]);
    }
    // The generator must actually produce secrets, or the comparison proves nothing.
    expect(hidden).toBeGreaterThan(3_000);
  });
});
