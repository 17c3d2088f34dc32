/**
 * The network enforcer as a process of its own: `node standalone.js <spec.json>`. The lab and `leash demo` start it
 * inside the agent namespace (`ip netns exec`), where it applies the nft chains and runs the proxy exactly as the
 * service does. Prints "ready" once every subject is applied; SIGHUP reopens the decision log (as the service does
 * for a rotation), re-reads the spec and changes only what differs; SIGTERM/SIGINT release every chain it applied
 * and exit.
 */
import fs from 'node:fs';
import {
  compilePolicy,
  decide,
  decideDnsAnswer,
  decideDnsName,
  type CompiledPolicy,
  type PolicyInput,
} from '../../engine/index.js';
import { createDecisionLog } from '../../log/decisions.js';
import { nativePathStats } from './proxy/arrival-fast.js';
import { startNetworkEnforcer, type NetworkEnforcer } from './enforcer.js';
import { hostRunner } from './nft/run.js';
import { releases } from './proxy/settle.js';

export interface StandaloneSpec {
  subjects: { uid: number; port: number; policy: PolicyInput | null; ech?: 'refuse' | 'allow' }[];
  resolvers: string[];
  udp?: 'drop' | 'allow';
  /** Decision log sink: an absolute file path (stdout carries this process's own "ready"/"reloaded"). */
  decisions: string;
  peekTimeoutMs?: number;
  /** What a subject without a policy answers under (default closed). */
  failMode?: 'closed' | 'open';
  maxConnections?: number;
  maxPerSubject?: number;
  /** What a refused DNS name gets (default refused). */
  dnsRefuse?: 'refused' | 'nxdomain';
  /** logging.allows (default all; summary lines every 60 s and at exit). */
  allows?: 'all' | 'summary';
}

async function main(): Promise<void> {
  const specPath = process.argv[2];
  if (!specPath) throw new Error('usage: standalone.js <spec.json>');
  const read = () => JSON.parse(fs.readFileSync(specPath, 'utf8')) as StandaloneSpec;
  let spec = read();
  const log = createDecisionLog({
    sink: spec.decisions,
    allows: spec.allows === 'summary' ? { mode: 'summary', intervalMs: 60_000 } : { mode: 'all' },
  });
  const enf: NetworkEnforcer<CompiledPolicy> = await startNetworkEnforcer<CompiledPolicy>({
    runner: hostRunner(),
    decide,
    decideDns: decideDnsName,
    decideDnsAnswer,
    log,
    resolvers: spec.resolvers,
    udp: spec.udp ?? 'drop',
    expectedSubjects: spec.subjects.length,
    dns: {
      refuse: spec.dnsRefuse,
      onError: (err, ctx) => process.stderr.write(`dns uid=${ctx.uid} ${ctx.stage}: ${err.message}\n`),
    },
    proxy: {
      peekTimeoutMs: spec.peekTimeoutMs,
      failMode: spec.failMode ?? 'closed',
      ...(spec.maxConnections ? { maxConnections: spec.maxConnections } : {}),
      ...(spec.maxPerSubject ? { maxPerSubject: spec.maxPerSubject } : {}),
      onError: (err, ctx) =>
        process.stderr.write(
          `proxy uid=${ctx.uid} ${ctx.stage}: ${err.message}${ctx.suppressed ? ` (+${ctx.suppressed} suppressed)` : ''}\n`,
        ),
    },
  });
  const current = new Map<number, string>();
  const applyAll = async (s: StandaloneSpec) => {
    for (const sub of s.subjects) {
      const key = JSON.stringify(sub);
      if (current.get(sub.uid) === key) continue;
      const policy = sub.policy ? compilePolicy(sub.policy) : null;
      const outcome = await enf.setSubject({
        uid: sub.uid,
        port: sub.port,
        policy,
        ...(sub.ech ? { ech: sub.ech } : {}),
      });
      current.set(sub.uid, key);
      process.stderr.write(`subject ${sub.uid} port ${sub.port}: ${outcome}\n`);
    }
  };
  try {
    await applyAll(spec);
  } catch (e) {
    // Never leave half a set of chains behind a process that is about to exit.
    await enf.stop().catch(() => {});
    throw e;
  }
  let chain = Promise.resolve();
  process.on('SIGHUP', () => {
    chain = chain.then(async () => {
      try {
        log.reopen();
        spec = read();
        await applyAll(spec);
        process.stdout.write('reloaded\n');
      } catch (e) {
        process.stderr.write(`reload failed, previous rules kept: ${(e as Error).message}\n`);
      }
    });
  });
  // SIGUSR2: one line of memory figures on stderr (bench/soak reads where RSS sits: V8 heap, buffers, the rest).
  process.on('SIGUSR2', () => {
    const m = process.memoryUsage();
    const mib = (n: number) => Math.round((n / 1048576) * 10) / 10;
    process.stderr.write(
      `memory ${JSON.stringify({ rss: mib(m.rss), heapTotal: mib(m.heapTotal), heapUsed: mib(m.heapUsed), external: mib(m.external), arrayBuffers: mib(m.arrayBuffers), releases: releases() })}\n`,
    );
    // Which way the proxy's connections went (tests: the native verdict path was taken, or not).
    process.stderr.write(`proxy-path ${JSON.stringify(nativePathStats())}\n`);
  });
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    void chain
      .then(() => enf.stop())
      .then(() => log.close())
      .then(
        () => process.exit(0),
        (e: Error) => {
          process.stderr.write(`stop: ${e.message}\n`);
          process.exit(1);
        },
      );
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.stdout.write('ready\n');
}

main().catch((e: unknown) => {
  process.stderr.write(`network enforcer: ${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});
