/**
 * Differential test of the inspection pre-filters: the current detectors (src/engine/inspect.ts)
 * against a frozen copy of the code before the pre-filters (fixtures/inspect-reference.ts), on
 * generated inputs full of secret-, PII- and command-like material. A pre-filter may only skip
 * work, never a finding: findings, masks and masked copies must be identical.
 */
import { describe, expect, it } from 'vitest';
import { inspectInputs, maskInputs, maskSecrets } from '../../../src/engine/inspect.js';
import type { InspectAction, InspectCategory } from '../../../src/engine/types.js';
import * as ref from './fixtures/inspect-reference.js';
import { mulberry32 as prng } from '../../lab/prng.js';

const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const UPPERNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';

// Fragments: every detector's literal (whole and cut short), near misses, separators, unicode.
const FRAGMENTS = [
  '-----BEGIN RSA PRIVATE KEY-----',
  '-----BEGIN PRIVATE KEY-----',
  '-----END PRIVATE KEY-----',
  '-----BEGIN',
  'PRIVATE KEY',
  'AKIA',
  'ASIA',
  'ABIA',
  'ACCA',
  'AKI',
  'ghp_',
  'gho_',
  'ghs_',
  'gh',
  'github_pat_',
  'glpat-',
  'xoxb-',
  'xoxp-',
  'xox',
  'https://hooks.slack.com/services/',
  'sk_live_',
  'rk_live_',
  'k_live',
  'sk-ant-',
  'sk-',
  'sk-proj-',
  'AIza',
  'npm_',
  'hf_',
  'SG.',
  'eyJ',
  'eyJhbGciOiJIUzI1NiJ9.',
  'Bearer ',
  'Basic ',
  'bearer ',
  'https://',
  'postgres://',
  'user:',
  '@',
  'a@b.com',
  'mail.example.org',
  'password=',
  'api_key: ',
  'DB_PASSWORD=',
  '"secret": "',
  'token:=',
  'changeme',
  'get_password(',
  '=',
  ':',
  '4111 1111 1111 1111',
  '4111111111111111',
  '5500-0000-0000-0004',
  '378282246310005',
  '+1 (555) 010-9999',
  '+44 20 7946 0958',
  '+',
  '123-45-6789',
  '078-05-1120',
  '-',
  'sudo ',
  '/usr/bin/sudo',
  'pseudo',
  'pkexec',
  'doas',
  'su -',
  'su root',
  'su',
  'chmod u+s ',
  'chmod 4755 ',
  'chmod',
  'setuid(0)',
  'setresuid( 0',
  'set',
  'rm -rf /',
  'rm -r -f //',
  'rm --no-preserve-root',
  '/tmp/..',
  '/*',
  'rm',
  ' ',
  '\t',
  '\n',
  ';',
  '|',
  '"',
  "'",
  '`',
  '(',
  '/',
  '.',
  '_',
  'é',
  'ſ',
  'K',
  '\u200b',
  'Ｓ',
];

function gen(r: () => number): { string: () => string; value: (d: number) => unknown } {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const run = (alphabet: string, min: number, max: number) => {
    let s = '';
    const n = min + Math.floor(r() * (max - min + 1));
    for (let i = 0; i < n; i++) s += alphabet[Math.floor(r() * alphabet.length)];
    return s;
  };
  const B64URL = ALNUM + '-_';
  // Whole tokens of the shapes the detectors look for (a random run rarely hits a fixed length).
  const token = (): string =>
    pick([
      () => 'AIza' + run(B64URL, 34, 36),
      () => 'hf_' + run(ALNUM, 33, 41),
      () => 'npm_' + run(ALNUM, 35, 37),
      () => 'eyJ' + run(B64URL, 7, 12) + '.eyJ' + run(B64URL, 7, 12) + '.' + run(B64URL, 0, 8),
      () => 'SG.' + run(B64URL, 21, 23) + '.' + run(B64URL, 42, 44),
      () => pick(['https', 'ftp', 'redis', 'x']) + '://' + run(ALNUM, 1, 8) + ':' + run(ALNUM + '%!', 1, 12) + '@',
      () => 'ghp_' + run(ALNUM, 35, 40),
      () => 'AKIA' + run(UPPERNUM, 15, 17),
    ])();
  const piece = (): string => {
    const k = r();
    if (k < 0.08) return token();
    if (k < 0.45) return pick(FRAGMENTS);
    if (k < 0.6) return run(ALNUM, 1, 48);
    if (k < 0.7) return run(UPPERNUM, 14, 18);
    if (k < 0.8) return run('0123456789', 1, 16);
    if (k < 0.85) return run('0123456789 -', 10, 22);
    if (k < 0.9) return run(ALNUM + '-_', 30, 60);
    return run(ALNUM + ' ./-_@:=+', 1, 20);
  };
  const string = () => {
    let s = '';
    const n = Math.floor(r() * 8);
    for (let i = 0; i < n; i++) s += piece();
    return s;
  };
  const KEYS = ['path', 'q', 'password', 'api_key', 'cmd', 'args', 'token', 'my-secret', 'n', 'AKIA', 'x y'];
  const value = (d: number): unknown => {
    const k = r();
    if (d > 3 || k < 0.45) return string();
    if (k < 0.55) return Math.floor(r() * 1e16) * (r() < 0.5 ? 1 : 123);
    if (k < 0.6) return r() < 0.5 ? null : true;
    if (k < 0.8) return Array.from({ length: Math.floor(r() * 5) }, () => (r() < 0.6 ? piece() : value(d + 1)));
    const o: Record<string, unknown> = {};
    const n = Math.floor(r() * 5);
    for (let i = 0; i < n; i++) o[r() < 0.7 ? pick(KEYS) : string()] = value(d + 1);
    return o;
  };
  return { string, value };
}

const ACTION_SETS: Record<InspectCategory, InspectAction>[] = [
  { secrets: 'block', pii: 'log', priv_esc: 'block' },
  { secrets: 'allow', pii: 'allow', priv_esc: 'block' },
  { secrets: 'log', pii: 'allow', priv_esc: 'allow' },
  { secrets: 'allow', pii: 'block', priv_esc: 'allow' },
];

describe('inspection pre-filters change no finding (differential against the unfiltered detectors)', () => {
  it('maskSecrets: identical on 20,000 generated strings', () => {
    const g = gen(prng(1));
    let changed = 0;
    for (let i = 0; i < 20_000; i++) {
      const s = g.string();
      const want = ref.maskSecrets(s);
      expect(maskSecrets(s), JSON.stringify(s)).toBe(want);
      if (want !== s) changed++;
    }
    // The generator must actually produce secrets, or the comparison proves nothing.
    expect(changed).toBeGreaterThan(2_000);
  });

  it('inspectInputs and maskInputs: identical on 8,000 generated inputs, every detector exercised', () => {
    const g = gen(prng(2));
    const detectors = new Set<string>();
    for (let i = 0; i < 8_000; i++) {
      const v = g.value(0);
      const actions = ACTION_SETS[i % ACTION_SETS.length]!;
      const want = ref.inspectInputs(v, actions);
      expect(inspectInputs(v, actions), JSON.stringify(v)).toEqual(want);
      for (const f of want) detectors.add(f.detector);
      expect(maskInputs(v)).toEqual(ref.maskInputs(v));
    }
    expect([...detectors].sort()).toEqual(
      [
        'anthropic_key',
        'aws_access_key',
        'basic_auth',
        'bearer_token',
        'credential_assignment',
        'credential_field',
        'credit_card',
        'doas',
        'email',
        'github_token',
        'gitlab_token',
        'google_api_key',
        'huggingface_token',
        'jwt',
        'npm_token',
        'openai_key',
        'phone',
        'pkexec',
        'private_key',
        'rm_rf_root',
        'sendgrid_key',
        'setuid_call',
        'setuid_chmod',
        'slack_token',
        'slack_webhook',
        'stripe_key',
        'su_root',
        'sudo',
        'url_credentials',
        'us_ssn',
      ].sort(),
    );
  });
});
