/**
 * The detectors' needs (src/engine/needs.ts DETECTOR_NEEDS): what every match contains, which the
 * gate's native judge checks over a call's bytes to know that inspection would find nothing. A need
 * may be weaker than the detector but never stronger: a text a detector finds something in must meet
 * its need, on every generated text and on the examples each detector is written for.
 */
import { describe, expect, it } from 'vitest';
import { DETECTOR_NEEDS, inspectionNeeds, meetsNeed, sensitiveKey } from '../../../src/engine/inspect.js';
import { JS_SPACES } from '../../../src/engine/needs.js';
import { SECRET_DETECTORS } from '../../../src/engine/secrets.js';
import { PII_DETECTORS } from '../../../src/engine/pii.js';
import { PRIV_ESC_DETECTORS } from '../../../src/engine/priv-esc.js';
import type { Span } from '../../../src/engine/detect.js';
import { mulberry32 as prng } from '../../lab/prng.js';
import { FRAGMENTS, gen } from './fixtures/inspect-gen.js';

const DETECTORS = [...SECRET_DETECTORS, ...PII_DETECTORS, ...PRIV_ESC_DETECTORS];

// One match of each detector, so a need that misses a detector's every match fails even if the generator does not.
const EXAMPLES: Record<string, string> = {
  private_key: 'x -----BEGIN OPENSSH PRIVATE KEY-----\nabc',
  aws_access_key: 'id AKIAABCDEFGHIJKLMNOP here',
  github_token: 'ghp_' + 'a1'.repeat(18),
  gitlab_token: 'glpat-' + 'x'.repeat(20),
  slack_token: 'xoxb-1234567890-abc',
  slack_webhook: 'https://hooks.slack.com/services/T000/B000/' + 'x'.repeat(24),
  stripe_key: 'sk_live_' + 'a'.repeat(24),
  anthropic_key: 'sk-ant-' + 'a'.repeat(24),
  openai_key: 'sk-proj-' + 'aB3'.repeat(8),
  google_api_key: 'AIza' + 'b'.repeat(35),
  npm_token: 'npm_' + 'c'.repeat(36),
  huggingface_token: 'hf_' + 'd'.repeat(34),
  sendgrid_key: 'SG.' + 'e'.repeat(22) + '.' + 'f'.repeat(43),
  jwt: 'eyJhbGciOiJI.eyJzdWIiOiJ4.sig',
  bearer_token: 'Authorization: Bearer abcdefghijklmnopqrstuvwxyz',
  basic_auth: 'Basic dXNlcjpwYXNzd29yZA==',
  url_credentials: 'postgres://user:hunter22@db',
  credential_assignment: 'DB_PASSWORD=hunter22',
  email: 'mail a@example.com',
  credit_card: '4111 1111 1111 1111',
  phone: 'call +44 20 7946 0958',
  us_ssn: 'ssn 078-05-1120',
  sudo: 'sudo ls',
  pkexec: 'pkexec ls',
  doas: 'doas ls',
  su_root: 'su -',
  setuid_chmod: 'chmod u+s /bin/x',
  setuid_call: 'setuid(0)',
  rm_rf_root: 'rm -rf /',
};

function findings(text: string): Set<string> {
  const out: Span[] = [];
  for (const d of DETECTORS) d.find(text, out);
  return new Set(out.map((s) => s.detector));
}

describe('detector needs (what the native judge rules findings out by)', () => {
  it('every detector has a need, and inspectionNeeds covers every active one', () => {
    for (const d of DETECTORS) expect(DETECTOR_NEEDS[d.id], d.id).toBeDefined();
    expect(inspectionNeeds({ secrets: 'block', pii: 'log', priv_esc: 'block' })).toHaveLength(DETECTORS.length + 1);
    expect(inspectionNeeds({ secrets: 'allow', pii: 'allow', priv_esc: 'allow' })).toEqual([]);
  });

  it('JS_SPACES is every character \\s matches (rm_rf_root needs rm then one of them)', () => {
    const all = Array.from({ length: 0x10000 }, (_, cp) => String.fromCharCode(cp)).filter((c) => /\s/.test(c));
    expect([...JS_SPACES].sort()).toEqual(all.sort());
    // After rm, each one that makes a finding (a newline ends the command instead) meets the need.
    let found = 0;
    for (const c of all) {
      const text = `rm${c}-rf /`;
      if (!findings(text).has('rm_rf_root')) continue;
      found++;
      expect(meetsNeed(DETECTOR_NEEDS.rm_rf_root!, text), JSON.stringify(text)).toBe(true);
    }
    expect(found).toBeGreaterThan(20);
  });

  it("each detector's own example is found and meets its need", () => {
    for (const d of DETECTORS) {
      const text = EXAMPLES[d.id]!;
      expect(findings(text), d.id).toContain(d.id);
      expect(meetsNeed(DETECTOR_NEEDS[d.id]!, text), d.id).toBe(true);
    }
  });

  it("a text any detector finds something in meets that detector's need (60,000 generated texts)", () => {
    const g = gen(prng(7));
    const seen = new Set<string>();
    for (let i = 0; i < 60_000; i++) {
      const text = i % 3 === 0 ? FRAGMENTS[i % FRAGMENTS.length]! + g.string() : g.string();
      for (const id of findings(text)) {
        seen.add(id);
        if (!meetsNeed(DETECTOR_NEEDS[id]!, text))
          expect.fail(`${id} found in ${JSON.stringify(text)} without its need`);
      }
    }
    // The generator must reach the detectors, or the loop proves nothing.
    expect(seen.size).toBeGreaterThanOrEqual(20);
  });

  it('a sensitively named key meets the credential_field need', () => {
    const need = DETECTOR_NEEDS.credential_field!;
    const keys = [
      'password',
      'DB_PASSWD',
      'passphrase',
      'pwd',
      'client-secret',
      'x.token',
      'refresh_token',
      'API_KEY',
      'apikey',
      'secret_key',
      'private-key',
      'credentials',
      'Authorization',
      'cookie',
      'access-key',
    ];
    for (const k of keys) {
      expect(sensitiveKey(k), k).toBe(true);
      expect(meetsNeed(need, k), k).toBe(true);
    }
    const g = gen(prng(8));
    for (let i = 0; i < 20_000; i++) {
      const k = g.string();
      if (sensitiveKey(k)) expect(meetsNeed(need, k), k).toBe(true);
    }
  });

  it('a need that is not met is a real no: lower-case letters only fold from ASCII upper case', () => {
    expect(meetsNeed({ all: [['sudo']] }, 'SUDO')).toBe(true);
    expect(meetsNeed({ all: [['sudo']] }, 'pseud0')).toBe(false);
    expect(meetsNeed({ all: [['-']], digits: 9 }, '12-345-678')).toBe(false);
    expect(meetsNeed({ all: [['-']], digits: 9 }, '123-45-6789')).toBe(true);
  });
});
