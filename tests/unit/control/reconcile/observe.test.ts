import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../../src/control/config/load.js';
import { configSchema } from '../../../../src/control/config/schema.js';
import { observe, observeCache } from '../../../../src/control/reconcile/loop.js';
import { emptyApplied, planReconcile } from '../../../../src/control/reconcile/plan.js';

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

describe("observing again with the service's cache", () => {
  const agents = ['leash-a', 'leash-b', 'leash-c'];
  const setup = () => {
    fs.writeFileSync(passwd, BASE + agents.map((a, i) => `${a}:x:${2001 + i}:${2001 + i}::/:/bin/sh\n`).join(''));
    fs.mkdirSync(path.join(stateDir, 'profiles'), { recursive: true });
    for (const a of agents)
      fs.writeFileSync(path.join(stateDir, `profiles/${a}.yaml`), 'network: { allow: [github.com] }\n');
    fs.writeFileSync(
      path.join(stateDir, 'bindings.yaml'),
      `version: 1\nbindings:\n${agents.map((a) => `  agent:${a}: { profile: ${a}, acks: [] }`).join('\n')}\n`,
    );
  };
  const run = async (cache: ReturnType<typeof observeCache>, cfg = config) => {
    const o = await observe({ config: cfg, stateDir, passwd: { path: passwd }, cache });
    if (!o.ok) throw new Error(o.message);
    return new Map(o.subjects.map((s) => [s.subject.account, s.resolution]));
  };
  const allow = (r: unknown) => (r as { ok: true; policy: { network: { allow: string[] } } }).policy.network.allow;

  it('resolves an unchanged subject to the same object, and sees every change to what it reads', async () => {
    setup();
    const cache = observeCache();
    const first = await run(cache);
    const again = await run(cache);
    for (const a of agents) expect(again.get(a)).toBe(first.get(a));

    // A profile edited: that subject alone is resolved anew, from the new text.
    fs.writeFileSync(path.join(stateDir, 'profiles/leash-b.yaml'), 'network: { allow: [api.github.com] }\n');
    const edited = await run(cache);
    expect(allow(edited.get('leash-b'))).toEqual(['api.github.com']);
    expect(edited.get('leash-a')).toBe(first.get('leash-a'));
    expect(edited.get('leash-c')).toBe(first.get('leash-c'));

    // The same result as observing without a cache, subject for subject.
    const fresh = await observe({ config, stateDir, passwd: { path: passwd } });
    if (!fresh.ok) throw new Error(fresh.message);
    for (const s of fresh.subjects) expect(edited.get(s.subject.account)).toEqual(s.resolution);

    // A binding's acks, a profile removed, and the floor: each is an input.
    fs.writeFileSync(
      path.join(stateDir, 'bindings.yaml'),
      'version: 1\nbindings:\n  agent:leash-a: { profile: leash-a, acks: [x] }\n  agent:leash-c: { profile: leash-c, acks: [] }\n',
    );
    fs.rmSync(path.join(stateDir, 'profiles/leash-c.yaml'));
    const rebound = await run(cache);
    expect(rebound.get('leash-a')).not.toBe(first.get('leash-a'));
    expect(rebound.get('leash-b')).toMatchObject({ ok: true });
    expect(allow(rebound.get('leash-b'))).toEqual(['github.com']); // unbound now: the floor's
    expect(rebound.get('leash-c')).toMatchObject({ ok: false, failure: { code: 'dangling_profile' } });
    const wider = configSchema.parse({ user: 'fido', network: { allow: ['github.com', 'example.org'] } });
    const floorChanged = await run(cache, wider);
    expect(floorChanged.get('leash-a')).not.toBe(rebound.get('leash-a'));
  });

  it('a profile whose text is the same is not parsed again, one whose text changed is', async () => {
    setup();
    const cache = observeCache();
    await run(cache);
    const file = path.join(stateDir, 'profiles/leash-a.yaml');
    const before = cache.state.profiles.get(file)!.status;
    await run(cache);
    expect(cache.state.profiles.get(file)!.status).toBe(before);
    // Same length, same mtime granularity does not matter: the text is compared, not the file's stat.
    fs.writeFileSync(file, 'network: { allow: [gitlab.com] }\n');
    await run(cache);
    expect(cache.state.profiles.get(file)!.status).not.toBe(before);
    expect(cache.state.profiles.get(file)!.status).toMatchObject({
      status: 'ok',
      fragment: { network: { allow: ['gitlab.com'] } },
    });
    // A profile no binding names any more leaves the cache with the pass after.
    fs.writeFileSync(path.join(stateDir, 'bindings.yaml'), 'version: 1\nbindings: {}\n');
    await run(cache);
    expect(cache.state.profiles.has(file)).toBe(false);
  });
});
