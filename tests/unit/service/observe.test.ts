import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/validate/load.js';
import { configSchema } from '../../../src/config/schema.js';
import { observe } from '../../../src/service/observe.js';
import { emptyApplied, planReconcile } from '../../../src/service/plan.js';

let dir: string;
let stateDir: string;
let passwd: string;
const config = configSchema.parse({ user: 'fido', network: { allow: ['github.com'] } });
const BASE = 'root:x:0:0::/root:/bin/sh\nfido:x:1000:1000::/home/fido:/bin/sh\n';

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-observe-'));
  stateDir = path.join(dir, 'state');
  passwd = path.join(dir, 'passwd');
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('reconcile observation', () => {
  it('takes the single-subject path without agent accounts and creates no state directory', async () => {
    fs.writeFileSync(passwd, BASE);
    const o = await observe({ config, stateDir, passwd: { path: passwd } });
    expect(o.ok && o.mode).toBe('single');
    expect(o.ok && o.subjects.map((s) => [s.subject.account, s.port])).toEqual([['fido', 18443]]);
    expect(fs.existsSync(stateDir)).toBe(false);
  });

  it('gives agents ports and fails a broken binding alone', async () => {
    fs.writeFileSync(passwd, `${BASE}leash-a:x:2001:2001::/:/bin/sh\nleash-b:x:2002:2002::/:/bin/sh\n`);
    fs.mkdirSync(path.join(stateDir, 'profiles'), { recursive: true });
    fs.writeFileSync(path.join(stateDir, 'profiles/bad.yaml'), 'network: [\n');
    fs.writeFileSync(
      path.join(stateDir, 'bindings.yaml'),
      'version: 1\nbindings:\n  agent:leash-a: { profile: bad, acks: [] }\n',
    );
    const o = await observe({ config, stateDir, passwd: { path: passwd } });
    expect(o.ok).toBe(true);
    if (!o.ok) return;
    expect(o.subjects.map((s) => [s.subject.account, s.port, s.resolution.ok])).toEqual([
      ['fido', 18000, true],
      ['leash-a', 18001, false],
      ['leash-b', 18002, true],
    ]);
    const plan = planReconcile(emptyApplied('multi'), o);
    expect(plan.actions.map((a) => `${a.kind}:${a.account}`)).toEqual(['add:fido', 'fail:leash-a', 'add:leash-b']);
  });

  it.each([
    ['passwd unreadable', 'passwd_unreadable', () => undefined],
    [
      'port map corrupt',
      'ports_corrupt',
      () => {
        fs.writeFileSync(passwd, `${BASE}leash-a:x:2001:2001::/:/bin/sh\n`);
        fs.mkdirSync(stateDir);
        fs.writeFileSync(path.join(stateDir, 'ports.json'), '{ nope');
      },
    ],
    [
      'bindings corrupt',
      'bindings_corrupt',
      () => {
        fs.writeFileSync(passwd, `${BASE}leash-a:x:2001:2001::/:/bin/sh\n`);
        fs.mkdirSync(stateDir);
        fs.writeFileSync(path.join(stateDir, 'bindings.yaml'), 'bindings: [1, 2]\n');
      },
    ],
    [
      'floor unreadable',
      'config_missing',
      () => {
        fs.writeFileSync(passwd, BASE);
      },
    ],
  ])('a wholesale failure (%s) plans nothing', async (_n, code, setup) => {
    setup();
    const load = () => (code === 'config_missing' ? loadConfig(path.join(dir, 'none.yaml')).config : config);
    const o = await observe({ config: load, stateDir, passwd: { path: passwd } });
    expect(o).toMatchObject({ ok: false, code });
    const prev = emptyApplied('multi');
    prev.subjects.set(2001, { account: 'leash-a', uid: 2001, port: 18001, state: 'active', hash: 'h' });
    const plan = planReconcile(prev, o);
    expect(plan.actions).toEqual([]);
    expect(plan.next).toBe(prev);
  });
});
