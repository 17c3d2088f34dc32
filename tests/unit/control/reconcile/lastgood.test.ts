import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  LAST_GOOD_VERSION,
  lastGoodPath,
  readLastGood,
  saveLastGood,
} from '../../../../src/control/reconcile/lastgood.js';
import type { Observation } from '../../../../src/control/reconcile/plan.js';

const obs: Extract<Observation, { ok: true }> = {
  ok: true,
  mode: 'multi',
  warnings: ['not saved'],
  subjects: [
    {
      subject: { kind: 'agent', account: 'leash-a', uid: 5001 },
      port: 18001,
      resolution: { ok: true, policy: { fail_mode: 'closed' } as never, hash: 'h1', layers: ['floor'], sources: {} },
    },
    {
      subject: { kind: 'agent', account: 'leash-b', uid: 5002 },
      port: null,
      resolution: {
        ok: false,
        failure: { code: 'dangling_profile', scope: 'agent:leash-b', profile: 'p', message: 'gone' },
      },
    },
  ],
};

describe('the last known good state: saved root-only, read back or ignored saying why', () => {
  let dir = '';
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-tcs-lg-'));
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('reads back what was saved, 0600 in a 0700 directory; none saved is null', () => {
    expect(readLastGood(dir)).toBeNull();
    saveLastGood(dir, obs);
    const file = lastGoodPath(dir);
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    expect(fs.statSync(path.dirname(file)).mode & 0o777).toBe(0o700);
    const r = readLastGood(dir);
    expect(r).toMatchObject({ ok: true, observation: { ok: true, mode: 'multi', warnings: [] } });
    expect(r?.ok && r.observation.subjects).toEqual(obs.subjects);
    // A second save replaces it whole (no temporary file left behind).
    saveLastGood(dir, { ...obs, subjects: obs.subjects.slice(0, 1) });
    expect(fs.readdirSync(path.dirname(file))).toEqual(['state.json']);
    const again = readLastGood(dir);
    expect(again?.ok && again.observation.subjects).toHaveLength(1);
  });

  it('ignores, naming why: another version, not JSON, a subject that is not one', () => {
    saveLastGood(dir, obs);
    const file = lastGoodPath(dir);
    const doc = JSON.parse(fs.readFileSync(file, 'utf8')) as Record<string, unknown>;
    fs.writeFileSync(file, JSON.stringify({ ...doc, version: LAST_GOOD_VERSION + 1 }));
    expect(readLastGood(dir)).toEqual({ ok: false, why: expect.stringMatching(/version 2.*a newer Leash/) });
    fs.writeFileSync(file, '{"version": 1, "subjects": [');
    expect(readLastGood(dir)).toEqual({ ok: false, why: expect.stringMatching(/not JSON/) });
    fs.writeFileSync(file, JSON.stringify({ ...doc, subjects: [{ subject: { uid: 'x' } }] }));
    expect(readLastGood(dir)).toEqual({ ok: false, why: expect.stringMatching(/subject 0 is not one/) });
  });

  it('does not trust a file others could have written: group or other access, a symlink', () => {
    saveLastGood(dir, obs);
    const file = lastGoodPath(dir);
    fs.chmodSync(file, 0o640);
    expect(readLastGood(dir)).toEqual({ ok: false, why: expect.stringMatching(/mode 640/) });
    fs.chmodSync(file, 0o600);
    fs.chmodSync(path.dirname(file), 0o755);
    expect(readLastGood(dir)).toEqual({ ok: false, why: expect.stringMatching(/mode 755/) });
    fs.chmodSync(path.dirname(file), 0o700);
    const elsewhere = path.join(dir, 'elsewhere.json');
    fs.renameSync(file, elsewhere);
    fs.symlinkSync(elsewhere, file);
    expect(readLastGood(dir)).toEqual({ ok: false, why: expect.stringMatching(/ELOOP/) });
  });
});
