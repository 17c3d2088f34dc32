/**
 * The network enforcer as a process of its own: `node standalone.js <spec.json>`. The lab and `leash demo` start it
 * inside the agent namespace (`ip netns exec`), where it applies the nft chains and runs the proxy exactly as the
 * service does. Prints "ready" once every subject is applied; SIGHUP re-reads the spec and changes only what
 * differs; SIGTERM/SIGINT release every chain it applied and exit.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { PolicyInput, Verdict, NetworkSubject } from '../../engine/types.js';
import { startNetworkEnforcer, type NetworkEnforcer } from './enforcer.js';
import type { DecisionLogLike, DecisionRecord } from './proxy.js';
import { hostRunner } from './run.js';

export interface StandaloneSpec {
  subjects: { uid: number; port: number; policy: PolicyInput | null }[];
  resolvers: string[];
  udp?: 'drop' | 'allow';
  /** Decision log sink: a file path or "stdout". */
  decisions: string;
  /** Module exporting compilePolicy/decide (default: the engine, src/engine/index.js). */
  engine?: string;
  peekTimeoutMs?: number;
}

interface EngineModule {
  compilePolicy(p: PolicyInput): unknown;
  decide(surface: 'network', subject: NetworkSubject, policy: unknown): Verdict;
}

const here = path.dirname(fileURLToPath(import.meta.url));

async function loadEngine(spec: StandaloneSpec): Promise<EngineModule> {
  const target = spec.engine ?? path.resolve(here, '../../engine/index.js');
  return (await import(pathToFileURL(target).href)) as EngineModule;
}

interface LogModule {
  createDecisionLog(o: { sink: string }): DecisionLogLike & { close(): Promise<void> };
}

/** The project's decision log when present; otherwise the same line shape written here. */
async function openLog(sink: string): Promise<DecisionLogLike & { close(): Promise<void> }> {
  try {
    const mod = (await import(pathToFileURL(path.resolve(here, '../../log/decisions.js')).href)) as LogModule;
    return mod.createDecisionLog({ sink });
  } catch {
    const fd = sink === 'stdout' ? 1 : fs.openSync(sink, 'a', 0o640);
    let n = 0;
    return {
      write(rec: DecisionRecord) {
        const ref = `${process.pid.toString(36)}-${(++n).toString(36)}`;
        fs.writeSync(fd, JSON.stringify({ ts: new Date().toISOString(), ref, ...rec }) + '\n');
        return ref;
      },
      async close() {
        if (fd !== 1) fs.closeSync(fd);
      },
    };
  }
}

async function main(): Promise<void> {
  const specPath = process.argv[2];
  if (!specPath) throw new Error('usage: standalone.js <spec.json>');
  const read = () => JSON.parse(fs.readFileSync(specPath, 'utf8')) as StandaloneSpec;
  let spec = read();
  const engine = await loadEngine(spec);
  const log = await openLog(spec.decisions);
  const enf: NetworkEnforcer<unknown> = await startNetworkEnforcer<unknown>({
    runner: hostRunner(),
    decide: (s, subj, p) => engine.decide(s, subj, p),
    log,
    resolvers: spec.resolvers,
    udp: spec.udp ?? 'drop',
    expectedSubjects: spec.subjects.length,
    proxy: {
      peekTimeoutMs: spec.peekTimeoutMs,
      onError: (err, ctx) => process.stderr.write(`proxy uid=${ctx.uid} ${ctx.stage}: ${err.message}\n`),
    },
  });
  const current = new Map<number, string>();
  const applyAll = async (s: StandaloneSpec) => {
    for (const sub of s.subjects) {
      const key = JSON.stringify(sub);
      if (current.get(sub.uid) === key) continue;
      const policy = sub.policy ? engine.compilePolicy(sub.policy) : null;
      const outcome = await enf.setSubject({ uid: sub.uid, port: sub.port, policy });
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
        spec = read();
        await applyAll(spec);
        process.stdout.write('reloaded\n');
      } catch (e) {
        process.stderr.write(`reload failed, previous rules kept: ${(e as Error).message}\n`);
      }
    });
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
