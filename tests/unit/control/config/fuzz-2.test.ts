/** Fuzz of the config loader (issue 13), second half: cases 50,000-99,999 of seed 1313. */
import { describe, it } from 'vitest';
import { fuzzLoader } from '../../../fixtures/config-fuzz-run.js';

describe('config loader fuzz (2/2)', () => {
  it(
    'cases 50,000-99,999 of seed 1313: a config or a coded refusal, bounded',
    () => fuzzLoader(1313, 50_000, 50_000),
    300_000,
  );
});
