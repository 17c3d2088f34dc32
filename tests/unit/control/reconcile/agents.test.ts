import { describe, expect, it } from 'vitest';
import { enforcerMismatches } from '../../../../src/control/reconcile/enforcers.js';

const all = { network: true, filesystem: true, tools: true };

describe('per-agent enforcer switches against the enforcers the service runs', () => {
  it('says nothing when they agree', () => {
    expect(enforcerMismatches('leash-a', all, all)).toEqual([]);
  });

  it('a profile that switches an enforcer off is told the surface stays enforced (a warning)', () => {
    expect(enforcerMismatches('leash-a', { ...all, tools: false }, all)).toEqual([
      expect.objectContaining({ critical: false, surface: 'tools', message: expect.stringMatching(/stays enforced/) }),
    ]);
  });

  it('a policy that enforces a surface whose enforcer is off is critical: nothing enforces it', () => {
    const out = enforcerMismatches('leash-a', all, { ...all, network: false, filesystem: false });
    expect(out.map((m) => [m.surface, m.critical])).toEqual([
      ['network', true],
      ['filesystem', true],
    ]);
    expect(out[0]!.message).toMatch(/leash-a: .*network is NOT enforced for it/);
  });
});
