import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { networkEnforcerFactory } from '../../src/enforcers/network/service.js';
import { netnsRunner, type Runner } from '../../src/enforcers/network/run.js';
import type { DecisionRecord } from '../../src/log/decisions.js';
import { createLogger } from '../../src/log/logger.js';
import { bareNetns, isRoot } from '../lab/index.js';

// The service-side factory, with nft pointed at a namespace of the test's own (never the host's ruleset).
const NS = 'lt-net-svc';
const account = { name: 'leash-tsvc', uid: 61500, gid: 61500, home: '/nonexistent' };
const yaml = (udp: string) => `user: leash-tsvc
network: { mode: whitelist, allow: [example.org], deny: [], dns_resolvers: [198.18.1.53], udp: ${udp} }
`;

describe.skipIf(!isRoot)('network enforcer factory (service path)', () => {
  let run: Runner;
  let cleanup: (() => Promise<void>) | null = null;
  beforeAll(async () => {
    cleanup = await bareNetns(NS);
    run = netnsRunner(NS);
  });
  afterAll(async () => {
    await cleanup?.();
  });

  it('applies the configured account, keeps an unchanged reload untouched, and releases everything on close', async () => {
    const lines: DecisionRecord[] = [];
    const decisions = { write: (r: DecisionRecord) => (lines.push(r), 'x'), close: async () => {} };
    const logger = createLogger({ level: 'error' });
    const loaded = parseConfig(yaml('drop'), 'test', { lookup: () => account });
    const factory = networkEnforcerFactory({ runner: run, port: 18991 });
    expect(factory.enabled(loaded)).toBe(true);
    const enf = await factory.start({ loaded, decisions, logger });
    try {
      const listing = async () => (await run(['nft', '-a', 'list', 'ruleset'])).stdout;
      const first = await listing();
      expect(first).toContain('meta skuid 61500 jump agent_61500');
      expect(first).toContain('redirect to :18991');
      expect(first).toContain('198.18.1.53');
      await enf.reload!({ loaded: parseConfig(yaml('drop'), 'test', { lookup: () => account }), decisions, logger });
      expect(await listing()).toBe(first);
    } finally {
      await enf.close();
    }
    expect(await run(['nft', 'list', 'ruleset'])).toMatchObject({ stdout: expect.not.stringMatching(/leash/) });
  });
});

describe.skipIf(!isRoot)('proxy on a host with IPv6 disabled', () => {
  const NS6 = 'lt-net-nov6';
  let cleanup: (() => Promise<void>) | null = null;
  beforeAll(async () => {
    cleanup = await bareNetns(NS6);
  });
  afterAll(async () => {
    await cleanup?.();
  });

  it('listens on 127.0.0.1 alone instead of failing the subject', async () => {
    const run = netnsRunner(NS6);
    await run(['sysctl', '-qw', 'net.ipv6.conf.all.disable_ipv6=1', 'net.ipv6.conf.default.disable_ipv6=1']);
    await run(['sysctl', '-qw', 'net.ipv6.conf.lo.disable_ipv6=1']);
    await run(['ip', 'link', 'set', 'lo', 'up']);
    const proxyJs = new URL('../../dist/src/enforcers/network/proxy.js', import.meta.url).pathname;
    const script = `import(${JSON.stringify(proxyJs)}).then(async (m) => {
      const errs = [];
      const p = m.createProxy({ decide: () => ({ action: 'block', reason: 'not_allowed', source: 'mode', rule: null }),
        log: { write: () => '' }, resolvers: [], onError: (e, c) => errs.push(c.stage + ':' + e.code) });
      await p.setSubject({ uid: 1, port: 18443, policy: null });
      console.log(JSON.stringify({ ports: [...p.ports()], errs }));
      await p.close();
    })`;
    const r = await run([process.execPath, '-e', script]);
    expect(r.stderr).toBe('');
    expect(JSON.parse(r.stdout)).toEqual({ ports: [[1, 18443]], errs: ['listen_ipv6:EADDRNOTAVAIL'] });
  });
});
