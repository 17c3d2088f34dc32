/**
 * Fuzz of the config loader (issue 13), first half: cases 0-49,999 of seed 1313 (the second half is
 * fuzz-2.test.ts, so vitest's workers run the 100,000 side by side). See fuzzLoader.
 */
import { describe, it } from 'vitest';
import { fuzzLoader } from '../../../fixtures/config-fuzz-run.js';

describe('config loader fuzz (1/2)', () => {
  it('cases 0-49,999 of seed 1313: a config or a coded refusal, bounded', () => fuzzLoader(1313, 0, 50_000), 300_000);
});
