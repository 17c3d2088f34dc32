import dgram from 'node:dgram';
import { afterEach, describe, expect, it } from 'vitest';
import { createNameResolver } from '../../../../src/dataplane/network/proxy/resolve.js';
import { answerDns } from '../../../../src/lab/upstream.js';

let close: (() => void) | null = null;
afterEach(() => {
  close?.();
  close = null;
});

/** A resolver on 127.0.0.1 (the lab's answers) that counts the queries it receives; `drop` answers none. */
async function server(names: Record<string, string[]>, drop = false) {
  const sock = dgram.createSocket('udp4');
  const seen: string[] = [];
  sock.on('message', (m, r) => {
    seen.push(m.subarray(12).toString('latin1'));
    const a = answerDns(m, names);
    if (a && !drop) sock.send(a, r.port, r.address);
  });
  await new Promise<void>((r) => sock.bind(0, '127.0.0.1', r));
  close = () => sock.close();
  return { addr: `127.0.0.1:${sock.address().port}`, seen };
}

describe("the proxy's own name resolution", () => {
  it('a burst of lookups for one name sends one A and one AAAA query, and all get the answer', async () => {
    const s = await server({ 'other.lab': ['198.18.1.30', '2001:db8:1::30'] });
    const resolve = createNameResolver([s.addr]);
    const all = await Promise.all(Array.from({ length: 500 }, () => resolve('other.lab')));
    for (const r of all) {
      expect(r.v4).toEqual(['198.18.1.30']);
      expect(r.v6).toEqual(['2001:db8:1::30']);
    }
    expect(s.seen).toHaveLength(2);
    // Cached by the answer's TTL: no query for the next one.
    await resolve('other.lab');
    expect(s.seen).toHaveLength(2);
  });

  it('a failed lookup is not cached nor kept in flight: the next one asks again', async () => {
    const s = await server({ 'other.lab': ['198.18.1.30'] }, true);
    const resolve = createNameResolver([s.addr]);
    const [a, b] = await Promise.all([resolve('other.lab'), resolve('other.lab')]);
    expect(a).toEqual(b);
    expect(a.v4).toEqual([]);
    const n = s.seen.length;
    expect(n).toBeGreaterThan(0);
    await resolve('other.lab');
    expect(s.seen.length).toBeGreaterThan(n);
  }, 20_000);
});
