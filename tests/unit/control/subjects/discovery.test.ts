import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, onTestFinished } from 'vitest';
import {
  defaultPasswdSource,
  discover,
  discoverFrom,
  parsePasswd,
  readPasswd,
  readPasswdAsync,
} from '../../../../src/control/subjects/discovery.js';
import {
  assignPorts,
  dnsPortFor,
  PORT_MAX,
  PORT_MIN,
  PORT_RESERVED,
  readPorts,
} from '../../../../src/control/subjects/ports.js';

const PASSWD = `root:x:0:0:root:/root:/bin/bash
fido:x:1000:1000:Fido:/home/fido:/bin/bash
leash-iris:x:2001:2001:Iris,,,:/home/leash-iris:/bin/sh
leash-vader:x:2002:2002:Vader:/home/leash-vader:/bin/sh
leash-root:x:0:0:oops:/root:/bin/sh
leash-dup:x:2001:2001::/:/bin/sh
broken line
`;

const dirs: string[] = [];
function tmp(): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-policy-'));
  dirs.push(d);
  return d;
}
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

describe('subject discovery', () => {
  it('finds the configured user and every leash-* account, and says what it skipped', () => {
    const warnings: string[] = [];
    const d = discoverFrom(parsePasswd(PASSWD, warnings), 'fido', warnings);
    expect(d.mode).toBe('multi');
    expect(d.subjects).toEqual([
      { kind: 'user', account: 'fido', uid: 1000 },
      { kind: 'agent', account: 'leash-iris', uid: 2001 },
      { kind: 'agent', account: 'leash-vader', uid: 2002 },
    ]);
    expect(d.warnings.join('\n')).toMatch(/malformed/);
    expect(d.warnings.join('\n')).toMatch(/leash-root has UID 0/);
    expect(d.warnings.join('\n')).toMatch(/leash-dup shares UID 2001/);
  });

  it('runs single-subject without agent accounts', () => {
    const d = discoverFrom(parsePasswd('fido:x:1000:1000::/home/fido:/bin/sh\n'), 'fido');
    expect(d.mode).toBe('single');
    expect(d.subjects).toHaveLength(1);
  });

  it('a passwd read failure is wholesale, never "no subjects"', () => {
    expect(() => discover('fido', { path: '/nonexistent/passwd' })).toThrow(
      expect.objectContaining({ code: 'passwd_unreadable' }),
    );
    const empty = path.join(tmp(), 'passwd');
    fs.writeFileSync(empty, '');
    expect(() => readPasswd({ path: empty })).toThrow(expect.objectContaining({ code: 'passwd_unreadable' }));
  });

  it('reads through getent too, and without blocking (the service)', async () => {
    const entries = readPasswd({ getent: true });
    expect(entries.find((e) => e.name === 'root')?.uid).toBe(0);
    expect(await readPasswdAsync({ getent: true })).toEqual(entries);
    await expect(readPasswdAsync({ path: '/nonexistent/passwd' })).rejects.toMatchObject({ code: 'passwd_unreadable' });
  });

  it('enumerates through NSS by default; LEASH_PASSWD names a file instead', () => {
    const saved = process.env.LEASH_PASSWD;
    onTestFinished(() => {
      if (saved === undefined) delete process.env.LEASH_PASSWD;
      else process.env.LEASH_PASSWD = saved;
    });
    delete process.env.LEASH_PASSWD;
    expect(defaultPasswdSource()).toEqual({ getent: true });
    process.env.LEASH_PASSWD = '/tmp/x/passwd';
    expect(defaultPasswdSource()).toEqual({ path: '/tmp/x/passwd' });
  });
});

describe('port map', () => {
  it('gives one port per account from the pool, skipping the reserved port, and keeps it', async () => {
    const dir = tmp();
    const a = await assignPorts(dir, [
      { account: 'leash-a', uid: 1 },
      { account: 'leash-b', uid: 2 },
    ]);
    expect(a.ports['leash-a']?.port).toBe(PORT_MIN);
    expect(a.ports['leash-b']?.port).toBe(PORT_MIN + 1);
    expect(a.written).toBe(true);
    // leash-a leaves: its port is never returned to the pool.
    const b = await assignPorts(dir, [
      { account: 'leash-b', uid: 2 },
      { account: 'leash-c', uid: 3 },
    ]);
    expect(b.ports['leash-a']?.port).toBe(PORT_MIN);
    expect(b.ports['leash-c']?.port).toBe(PORT_MIN + 2);
    const c = await assignPorts(dir, [{ account: 'leash-b', uid: 2 }]);
    expect(c.written).toBe(false);
    // Recreated with a new UID: same port, the map follows the UID.
    const d = await assignPorts(dir, [{ account: 'leash-b', uid: 22 }]);
    expect(d.ports['leash-b']).toEqual({ port: PORT_MIN + 1, uid: 22 });
    expect(d.written).toBe(true);
    expect(readPorts(dir)['leash-b']?.port).toBe(PORT_MIN + 1);
  });

  it('never hands out 18443 (or its DNS half 18943) and reports exhaustion per account', async () => {
    const dir = tmp();
    const ports: Record<string, { port: number; uid: number }> = {};
    let uid = 10;
    // Every pair (p, p+500) of every block taken but one: 20498 with its forwarder port 20998.
    for (let b = PORT_MIN; b < PORT_MAX; b += 1000)
      for (let p = b; p < b + 500; p++)
        if (p !== PORT_RESERVED && p !== 20498) ports[`leash-x${p}`] = { port: p, uid: uid++ };
    expect(Object.keys(ports).length).toBe(1498);
    fs.writeFileSync(path.join(dir, 'ports.json'), JSON.stringify({ version: 1, ports }));
    const r = await assignPorts(dir, [
      { account: 'leash-new', uid: 1 },
      { account: 'leash-new2', uid: 2 },
    ]);
    expect(r.ports['leash-new']?.port).toBe(20498);
    expect(dnsPortFor(20498)).toBe(20998);
    expect(r.unassigned).toEqual(['leash-new2']);
  });

  it('pairs ports within each block of 1,000: room for 1,499 subjects, none of whose ports collide', async () => {
    const dir = tmp();
    const accounts = Array.from({ length: 1500 }, (_, i) => ({ account: `leash-a${i}`, uid: 5000 + i }));
    const r = await assignPorts(dir, accounts);
    expect(r.unassigned).toEqual(['leash-a1499']);
    const all = Object.values(r.ports).flatMap((e) => [e.port, dnsPortFor(e.port)]);
    expect(all.length).toBe(2998);
    expect(new Set(all).size).toBe(2998);
    expect(Math.min(...all)).toBe(PORT_MIN);
    expect(Math.max(...all)).toBe(PORT_MAX);
    expect(PORT_MAX).toBe(20999);
    expect(all).not.toContain(PORT_RESERVED);
    expect(all).not.toContain(dnsPortFor(PORT_RESERVED));
    for (const [p, d] of [
      [18000, 18500],
      [18499, 18999],
      [19000, 19500],
      [19499, 19999],
      [20000, 20500],
      [20499, 20999],
    ])
      expect([dnsPortFor(p!), dnsPortFor(d!)]).toEqual([d, p]);
    expect(readPorts(dir)['leash-a1000']?.port).toBe(20001);
  });

  it('hands out a port only when its DNS half is free too (a map from before the forwarder)', async () => {
    const dir = tmp();
    // An old map holding 18500 (the DNS half of 18000) as a proxy port: 18000 is skipped, 18500's DNS port is 18000.
    fs.writeFileSync(
      path.join(dir, 'ports.json'),
      JSON.stringify({ version: 1, ports: { 'leash-old': { port: 18500, uid: 5 } } }),
    );
    const r = await assignPorts(dir, [{ account: 'leash-new', uid: 1 }]);
    expect(r.ports['leash-new']?.port).toBe(18001);
    expect(dnsPortFor(18500)).toBe(18000);
  });

  it.each([
    ['not JSON', '{'],
    ['no map', '{"version":1}'],
    ['out of range', '{"ports":{"leash-a":{"port":80,"uid":1}}}'],
    ['the reserved port', '{"ports":{"leash-a":{"port":18443,"uid":1}}}'],
    ['a port twice', '{"ports":{"leash-a":{"port":18000,"uid":1},"leash-b":{"port":18000,"uid":2}}}'],
  ])('a corrupt map (%s) is a typed error and changes nothing', async (_n, text) => {
    const dir = tmp();
    const file = path.join(dir, 'ports.json');
    fs.writeFileSync(file, text);
    await expect(assignPorts(dir, [{ account: 'leash-z', uid: 9 }])).rejects.toMatchObject({ code: 'ports_corrupt' });
    expect(fs.readFileSync(file, 'utf8')).toBe(text);
  });
});
