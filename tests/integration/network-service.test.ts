import { spawn } from 'node:child_process';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/control/config/load.js';
import { decide, decideDnsAnswer, decideDnsName, type CompiledPolicy } from '../../src/engine/index.js';
import { startNetworkEnforcer } from '../../src/dataplane/network/enforcer.js';
import { networkSubjectOf } from '../../src/control/reconcile/execute.js';
import type { ApplyAction, FailAction, OrphanAction } from '../../src/control/reconcile/plan.js';
import type { Effective } from '../../src/control/policy/fragment.js';
import { netnsRunner } from '../../src/dataplane/network/nft/run.js';
import { bareNetns, isRoot } from '../lab/index.js';

/** Listens on each host/port pair given (argv), says "up" once all listen, and accepts (then closes) whatever comes. */
const SQUATTER = `const net = require('node:net'); const a = process.argv.slice(1); let n = 0;
for (let i = 0; i < a.length; i += 2) net.createServer((c) => c.destroy()).listen(+a[i + 1], a[i], () => { if (++n === a.length / 2) console.log('up'); });`;
/** Connects to argv host:port; prints "connected" or the error code. */
const CONNECT = `const s = require('node:net').connect(+process.argv[2], process.argv[1]);
s.on('connect', () => { console.log('connected'); s.destroy(); }); s.on('error', (e) => console.log(e.code));
setTimeout(() => { console.log('TIMEOUT'); process.exit(0); }, 3000).unref();`;

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

  /** The network enforcer on loopback (nft in the test's namespace), the surface itself, handed what execute compiles. */
  const startSurface = async (run: ReturnType<typeof netnsRunner>, expectedSubjects: number, dnsLoopback: boolean) => {
    const enf = await startNetworkEnforcer<CompiledPolicy>({
      runner: run,
      decide,
      decideDns: decideDnsName,
      decideDnsAnswer,
      log: { write: () => 'r' },
      resolvers: ['198.18.1.53'],
      udp: 'drop',
      expectedSubjects,
      proxy: { hosts: ['127.0.0.1'] },
      ...(dnsLoopback ? { dns: { hosts: ['127.0.0.1'] } } : {}),
    });
    const hooks = {
      apply: (as: ApplyAction[]) => enf.apply(as.map((a) => networkSubjectOf(a, new Map()))),
      deny: (a: FailAction) => enf.deny(a),
      orphan: (a: OrphanAction) => enf.orphan(a),
    };
    return { enf, hooks };
  };

  const effective = (text: string): Effective => {
    const { user: _u, logging: _l, ...rest } = parseConfig(text, 'test', { lookup: () => null }).config;
    return rest;
  };

  it('apply / orphan / deny: chains per subject with its own udp and resolvers, kept on orphan and on deny (fail closed), sealed without a port', async () => {
    const run = netnsRunner(NSP);
    const { enf, hooks } = await startSurface(run, 2, false);
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
      // No port at all: nothing of ours to redirect to, so the listener goes and the chain is sealed (no redirect,
      // TCP reset, the rest dropped): the subject stays confined, closed.
      await hooks.deny({
        kind: 'fail',
        account: 'leash-tb',
        uid: 62002,
        port: null,
        failure: { code: 'no_port', message: 'x' },
        hadChain: true,
      });
      expect(await chain('ip', 62002)).not.toContain('redirect');
      expect(await chain('inet', 62002)).toContain('meta l4proto tcp reject with tcp reset');
      expect(await chain('inet', 62002)).toMatch(/reject with tcp reset[^\n]*\n\s*drop/);
      expect(enf.proxy.ports().has(62002)).toBe(false);
    } finally {
      await enf.stop();
    }
  });

  it('many new subjects at once: listeners open side by side, one whose port is taken fails alone and is sealed', async () => {
    const run = netnsRunner(NSP);
    const { enf, hooks } = await startSurface(run, 150, true);
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
      // The pass denies it (execute.ts): its listener still cannot open, so its chain is sealed, not dropped.
      await hooks.deny({
        kind: 'fail',
        account: 'leash-tm99',
        uid: 62199,
        port: 19499,
        failure: { code: 'apply_failed', message: 'EADDRINUSE' },
        hadChain: false,
      });
      const sealed = (await run(['nft', 'list', 'chain', 'inet', 'leash_filter', 'agent_62199'])).stdout;
      expect(sealed).toContain('meta l4proto tcp reject with tcp reset');
      expect((await run(['nft', 'list', 'chain', 'ip', 'leash', 'agent_62199'])).stdout).not.toContain('redirect');
    } finally {
      squat.close();
      await enf.stop();
    }
  });

  it('as the agent whose port another process took: every connection is refused, none reaches that process', async () => {
    const run = netnsRunner(NSP);
    await run(['ip', 'link', 'set', 'lo', 'up']);
    const { enf, hooks } = await startSurface(run, 2, true);
    const squat = net.createServer();
    await new Promise<void>((r) => squat.listen({ host: '127.0.0.1', port: 19498, exclusive: true }, () => r()));
    // The squatter inside the agent's namespace: a root process listening on a port, counting what reaches it.
    const inside = spawn(
      'ip',
      ['netns', 'exec', NSP, process.execPath, '-e', SQUATTER, '127.0.0.1', '19498', '127.0.0.1', '8080'],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    try {
      await new Promise<void>((r) => inside.stdout!.once('data', () => r()));
      const connect = async (port: string) =>
        (
          await run([
            'setpriv',
            '--reuid=62198',
            '--regid=62198',
            '--clear-groups',
            process.execPath,
            '-e',
            CONNECT,
            '127.0.0.1',
            port,
          ])
        ).stdout.trim();
      // Before Leash: the account reaches both local ports (what "unconfined" means here).
      expect(await connect('19498')).toBe('connected');
      const pol = effective('network: { mode: whitelist, allow: [example.org] }\n');
      const add = { kind: 'add' as const, account: 'leash-tm98', uid: 62198, port: 19498, policy: pol, hash: 'h' };
      const errors = await hooks.apply([add]);
      expect((errors.get(62198) as NodeJS.ErrnoException).code).toBe('EADDRINUSE');
      await hooks.deny({ ...add, kind: 'fail', failure: { code: 'apply_failed', message: 'x' }, hadChain: false });
      // Sealed: the squatter's port and any other destination are refused at once (a reset, not a time-out).
      expect(await connect('19498')).toBe('ECONNREFUSED');
      expect(await connect('8080')).toBe('ECONNREFUSED');
      expect(await connect('19998')).toBe('ECONNREFUSED');
    } finally {
      inside.kill('SIGKILL');
      squat.close();
      await enf.stop();
    }
  });
});
