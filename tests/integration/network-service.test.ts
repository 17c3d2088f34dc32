import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/control/config/load.js';
import { decide, decideDnsAnswer, decideDnsName, type CompiledPolicy } from '../../src/engine/index.js';
import { startNetworkEnforcer } from '../../src/dataplane/network/enforcer.js';
import { networkSurface } from '../../src/control/reconcile/surfaces/network.js';
import { createLogger } from '../../src/log/logger.js';
import type { Effective } from '../../src/control/policy/fragment.js';
import { netnsRunner } from '../../src/dataplane/network/nft/run.js';
import { bareNetns, isRoot } from '../lab/index.js';

// nft always runs in a namespace of the test's own (never the host's ruleset).
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
    const proxyJs = new URL('../../dist/src/dataplane/network/proxy/proxy.js', import.meta.url).pathname;
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

describe.skipIf(!isRoot)('reconcile actions on the network surface (plan hooks)', () => {
  const NSP = 'lt-net-plan';
  let cleanup: (() => Promise<void>) | null = null;
  beforeAll(async () => {
    cleanup = await bareNetns(NSP);
  });
  afterAll(async () => {
    await cleanup?.();
  });

  const effective = (text: string): Effective => {
    const { user: _u, logging: _l, ...rest } = parseConfig(text, 'test', { lookup: () => null }).config;
    return rest;
  };

  it('apply / orphan / deny: chains per subject with its own udp and resolvers, kept on orphan and on deny (fail closed), dropped without a port', async () => {
    const run = netnsRunner(NSP);
    const enf = await startNetworkEnforcer<CompiledPolicy>({
      runner: run,
      decide,
      decideDns: decideDnsName,
      decideDnsAnswer,
      log: { write: () => 'r' },
      resolvers: ['198.18.1.53'],
      udp: 'drop',
      expectedSubjects: 2,
      proxy: { hosts: ['127.0.0.1'] },
    });
    const hooks = networkSurface(enf, run, createLogger({ level: 'error' }));
    try {
      const a = effective('network: { mode: whitelist, allow: [example.org] }\n');
      const b = effective('network: { mode: blacklist, udp: allow, dns_resolvers: [2001:db8::53] }\n');
      const errors = await hooks.apply([
        { kind: 'add', account: 'leash-ta', uid: 62001, port: 18961, policy: a, hash: 'h1' },
        { kind: 'add', account: 'leash-tb', uid: 62002, port: 18962, policy: b, hash: 'h2' },
      ]);
      expect(errors.size).toBe(0);
      const chain = async (fam: string, uid: number) =>
        (await run(['nft', 'list', 'chain', fam, fam === 'inet' ? 'leash_filter' : 'leash', `agent_${uid}`])).stdout;
      // Port 53 goes to the forwarder (the DNS half of the pair, 18961 - 500); the filter lets out only that.
      expect(await chain('ip', 62001)).toContain('udp dport 53 redirect to :18461');
      expect(await chain('ip6', 62001)).toContain('tcp dport 53 redirect to :18461');
      expect(await chain('inet', 62001)).toContain('ip daddr 127.0.0.1 udp dport 18461 return');
      expect(await chain('inet', 62002)).toContain('meta l4proto udp return');
      expect(await chain('ip', 62002)).toContain('redirect to :18962');
      expect([...enf.proxy.ports()]).toEqual([
        [62001, 18961],
        [62002, 18962],
      ]);

      await hooks.orphan({ kind: 'orphan', account: 'leash-ta', uid: 62001, port: 18961 });
      expect(await chain('ip', 62001)).toContain('redirect to :18961');
      expect(enf.proxy.ports().get(62001)).toBe(18961);

      await hooks.deny({
        kind: 'fail',
        account: 'leash-tb',
        uid: 62002,
        port: 18962,
        failure: { code: 'no_port', message: 'x' },
        hadChain: true,
      });
      // Fail closed: the failed subject keeps its chain (still redirected) and its listener refuses.
      expect(await chain('ip', 62002)).toContain('redirect to :18962');
      expect(await chain('inet', 62002)).toContain('meta l4proto != tcp drop');
      expect(await chain('ip', 62001)).toContain('redirect to :18961');
      expect(enf.proxy.ports().get(62002)).toBe(18962); // still listening, refusing
      // No port at all: nothing to redirect to, so the chain and the listener go.
      await hooks.deny({
        kind: 'fail',
        account: 'leash-tb',
        uid: 62002,
        port: null,
        failure: { code: 'no_port', message: 'x' },
        hadChain: true,
      });
      expect((await run(['nft', 'list', 'ruleset'])).stdout).not.toContain('agent_62002');
      expect(enf.proxy.ports().has(62002)).toBe(false);
    } finally {
      await enf.stop();
    }
  });

  it('many new subjects at once: listeners open side by side, one whose port is taken fails alone and gets no chain', async () => {
    const run = netnsRunner(NSP);
    const enf = await startNetworkEnforcer<CompiledPolicy>({
      runner: run,
      decide,
      decideDns: decideDnsName,
      decideDnsAnswer,
      log: { write: () => 'r' },
      resolvers: ['198.18.1.53'],
      udp: 'drop',
      expectedSubjects: 150,
      proxy: { hosts: ['127.0.0.1'] },
      dns: { hosts: ['127.0.0.1'] },
    });
    const hooks = networkSurface(enf, run, createLogger({ level: 'error' }));
    // Someone else's listener on the port of the 100th subject (in the middle of the second batch of 64).
    const squat = net.createServer();
    await new Promise<void>((r) => squat.listen({ host: '127.0.0.1', port: 19499, exclusive: true }, () => r()));
    try {
      const pol = effective('network: { mode: whitelist, allow: [example.org] }\n');
      const errors = await hooks.apply(
        Array.from({ length: 150 }, (_, i) => ({
          kind: 'add' as const,
          account: `leash-tm${i}`,
          uid: 62100 + i,
          port: 19400 + i,
          policy: pol,
          hash: 'h',
        })),
      );
      expect([...errors.keys()]).toEqual([62199]);
      expect((errors.get(62199) as NodeJS.ErrnoException).code).toBe('EADDRINUSE');
      expect(enf.proxy.ports().size).toBe(149);
      expect(enf.proxy.ports().has(62199)).toBe(false);
      const doc = JSON.parse((await run(['nft', '-j', 'list', 'map', 'ip', 'leash', 'agents'])).stdout) as {
        nftables: { map?: { elem?: [number, unknown][] } }[];
      };
      const inMap = doc.nftables.flatMap((x) => (x.map?.elem ?? []).map((e) => e[0]));
      expect(inMap).toHaveLength(149);
      expect(inMap).not.toContain(62199);
    } finally {
      squat.close();
      await enf.stop();
    }
  });
});
