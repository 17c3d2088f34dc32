/**
 * As root the whole suite runs: every program the root tests call is on PATH and the addon is built. Without this a
 * fresh machine would quietly skip (or half-run) what it cannot do; here it fails and says what to install.
 */
import { describe, expect, it } from 'vitest';
import { nativeAvailable } from '../../src/native.js';
import { isRoot } from '../lab/index.js';
import { missingPrograms } from '../lab/prereq.js';

describe.skipIf(!isRoot)('what the root tests need', () => {
  it('has every program the tests run (scripts/install-deps.sh installs them)', () => {
    expect(missingPrograms(), 'missing programs').toEqual([]);
  });

  it('has the native addon built (npm ci builds it; without it the watcher and lab tests cannot run)', () => {
    expect(nativeAvailable(), 'native addon: run npm ci (or npm run build:native) with npm_config_nodedir=/usr').toBe(
      true,
    );
  });
});
