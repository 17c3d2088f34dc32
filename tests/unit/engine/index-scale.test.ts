import { describe, expect, it } from 'vitest';
import { compilePolicy, decide, type PolicyInput } from '../../../src/engine/index.js';
import { IntTable } from '../../../src/engine/hash.js';
import { makePolicy } from './helpers.js';

const N = 100_000;

function label(i: number): string {
  return 'n' + i.toString(36);
}

describe('indexed lookups at 100,000 entries', () => {
  const allow = {
    network: Array.from({ length: N }, (_, i) =>
      i % 2 === 0 ? `${label(i)}.example.com` : `10.${(i >> 8) & 255}.${i & 255}.0/24`,
    ),
    filesystem: Array.from({ length: N }, (_, i) => `/srv/${label(i)}/data`),
    commands: Array.from({ length: N }, (_, i) => (i % 2 === 0 ? label(i) : `/opt/${label(i)}/bin/run`)),
  };
  const policy: PolicyInput = makePolicy({
    network: { mode: 'whitelist', allow: allow.network, deny: ['deny.example.com'] },
    filesystem: { mode: 'whitelist', allow: allow.filesystem, deny: [] },
    commands: { mode: 'whitelist', allow: allow.commands, deny: [] },
  });
  const t0 = performance.now();
  const p = compilePolicy(policy);
  const compileMs = performance.now() - t0;

  it('compiles in well under a few seconds', () => {
    expect(compileMs).toBeLessThan(5000);
  });

  it.each([0, 1, 2, 3, N / 2, N - 2, N - 1])('finds entry #%i', (i) => {
    if (i % 2 === 0) {
      expect(decide('network', { domain: `api.${label(i)}.example.com`, port: 443 }, p).rule).toBe(
        `${label(i)}.example.com`,
      );
      expect(decide('commands', { binary: `/usr/bin/${label(i)}` }, p).rule).toBe(label(i));
    } else {
      expect(decide('network', { ip: `10.${(i >> 8) & 255}.${i & 255}.77`, port: 443 }, p).rule).toBe(allow.network[i]);
      expect(decide('commands', { binary: `/opt/${label(i)}/bin/run` }, p).rule).toBe(`/opt/${label(i)}/bin/run`);
    }
    expect(decide('filesystem', { path: `/srv/${label(i)}/data/x/y` }, p).rule).toBe(`/srv/${label(i)}/data`);
  });

  it.each([
    ['network', { domain: `x${label(N)}.example.com`, port: 443 }],
    ['network', { domain: 'deny.example.com', port: 443 }],
    ['network', { ip: '11.0.0.1', port: 443 }],
    ['filesystem', { path: `/srv/${label(0)}/dat` }],
    ['filesystem', { path: `/srv/${label(N)}/data` }],
    ['commands', { binary: `/usr/bin/${label(1)}` }],
  ] as const)('blocks %s %j', (surface, subject) => {
    expect(decide(surface, subject as never, p).action).toBe('block');
  });

  it('answers 30,000 decisions in a time no linear scan of 100,000 entries could', () => {
    // A linear scan would do 30,000 x 100,000 = 3e9 comparisons per surface (tens of seconds).
    const start = performance.now();
    for (let i = 0; i < 10_000; i++) {
      const k = (i * 7919) % N;
      decide('network', { domain: `www.${label(k)}.example.com`, port: 443 }, p);
      decide('filesystem', { path: `/srv/${label(k)}/data/f` }, p);
      decide('commands', { binary: `/usr/local/bin/${label(k)}` }, p);
    }
    expect(performance.now() - start).toBeLessThan(3000);
  });
});

describe('IntTable', () => {
  it('stores, replaces and finds keys across growth, including negative and colliding slots', () => {
    const t = new IntTable<number>();
    const keys = Array.from({ length: 5000 }, (_, i) => Math.imul(i, 0x9e3779b1) | 0);
    keys.push(-1, 0x7fffffff, -0x80000000); // keys[0] is already 0
    keys.forEach((k, i) => t.set(k, i));
    keys.forEach((k, i) => expect(t.get(k)).toBe(i));
    t.set(0, -5);
    expect(t.get(0)).toBe(-5);
    expect(t.size).toBe(keys.length);
    let misses = 0;
    for (let i = 0; i < 5000; i++) if (t.get(Math.imul(i + 1_000_000, 0x85ebca6b) | 0) === undefined) misses++;
    expect(misses).toBe(5000);
  });
});
