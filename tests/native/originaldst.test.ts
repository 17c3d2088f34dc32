import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { netnsRunner, type Runner } from '../../src/dataplane/network/nft/run.js';
import { nativeAvailable } from '../../src/native.js';
import { bareNetns } from '../lab/index.js';

// A connection redirected by nft inside a namespace: the addon must report where it was really going, at SOL_IP
// for IPv4 and SOL_IPV6 for IPv6 — and a connection made straight to the listener reports the listener itself.
const NS = 'lt-net-odst';
const addon = path.resolve('build/Release/leash_native.node');

const script = `
const net = require('node:net');
const { originalDst } = require(${JSON.stringify(addon)});
const out = [];
const listen = (host) => new Promise((r) => {
  const s = net.createServer((c) => { try { out.push(originalDst(c._handle.fd)); } catch (e) { out.push({ error: e.code }); } c.destroy(); });
  s.listen(15000, host, () => r(s));
});
const hit = (host, port) => new Promise((r) => { const c = net.connect(port, host); c.on('error', () => {}); c.on('close', r); });
(async () => {
  const servers = [await listen('127.0.0.1'), await listen('::1')];
  await hit('198.18.5.5', 4444);
  await hit('2001:db8:5::5', 4445);
  await hit('127.0.0.1', 15000);
  process.stdout.write(JSON.stringify(out));
  servers.forEach((s) => s.close());
})();
`;

describe.skipIf(!nativeAvailable() || process.getuid?.() !== 0)('originalDst in a namespace', () => {
  let run: Runner;
  let cleanup: (() => Promise<void>) | null = null;
  beforeAll(async () => {
    cleanup = await bareNetns(NS);
    run = netnsRunner(NS);
    for (const argv of [
      ['ip', 'link', 'set', 'lo', 'up'],
      ['ip', 'addr', 'add', '198.18.5.5/32', 'dev', 'lo'],
      ['ip', '-6', 'addr', 'add', '2001:db8:5::5/128', 'dev', 'lo', 'nodad'],
    ]) {
      const r = await run(argv);
      if (r.code !== 0) throw new Error(r.stderr);
    }
    const nft = await run(
      ['nft', '-f', '-'],
      `table inet t { chain o { type nat hook output priority -100; tcp dport { 4444, 4445 } redirect to :15000; }; }\n`,
    );
    if (nft.code !== 0) throw new Error(nft.stderr);
  });
  afterAll(async () => {
    await cleanup?.();
  });

  it('reports the pre-NAT destination for IPv4 and IPv6, and the listener itself for a direct connection', async () => {
    const r = await run([process.execPath, '-e', script]);
    expect(r.stderr).toBe('');
    expect(JSON.parse(r.stdout)).toEqual([
      { family: 4, address: '198.18.5.5', port: 4444 },
      { family: 6, address: '2001:db8:5::5', port: 4445 },
      { family: 4, address: '127.0.0.1', port: 15000 },
    ]);
  });
});
