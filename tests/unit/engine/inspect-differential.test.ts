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
import { gen } from './fixtures/inspect-gen.js';

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
