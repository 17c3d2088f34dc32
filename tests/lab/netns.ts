/**
 * The tests' and benches' network lab: the demo's (src/cli/demo/netns.ts) with this folder's upstream (a log of the
 * DNS messages received, a held TLS port, a bulk source) and probes (tests/lab/probe.ts), extra DNS-only names, and
 * small TCP services in either namespace. Builds from dist/ like the demo's (`npm run build` compiles tests/lab).
 */
import fs from 'node:fs';
import path from 'node:path';
import {
  buildLab as buildDemoLab,
  distSrc,
  type EnforcerHandle,
  type Lab as DemoLab,
  type LabEnforcerSpec as DemoEnforcerSpec,
  type LabOptions as DemoLabOptions,
} from '../../src/cli/demo/netns.js';
import { spawnReady, stopChild } from '../../src/cli/demo/children.js';
import type { Probe } from './probe.js';
import type { LabUpstreamConfig } from './upstream.js';

export * from '../../src/cli/demo/netns.js';
export type { Probe, ProbeResult } from './probe.js';

/** One message the lab resolver received: transport, the address it arrived at, the sender, and its question. */
export interface LabDnsQuery {
  transport: 'udp' | 'tcp';
  server: string;
  from: string;
  bytes: number;
  /** The message id (the probes send 0x1234; the forwarder sends a random one of its own). */
  id: number | null;
  name: string | null;
  qtype: number | null;
}

export interface LabEnforcerSpec extends DemoEnforcerSpec {
  /** RLIMIT_NOFILE of the enforcer process (soft and hard; a descriptor-exhaustion test). */
  nofile?: number;
  /** logging.allows of its decision log (default all). */
  allows?: 'all' | 'summary';
}

export interface Lab extends DemoLab<Probe> {
  startEnforcer(spec: LabEnforcerSpec): Promise<EnforcerHandle>;
  /**
   * Starts a small TCP service as root inside the agent (`agent`) or upstream namespace: on each `ports` entry it
   * answers `svc:<port>\n` and closes; a `banner` port speaks first (`220 banner`) and closes 100 ms later; a
   * `reset` port answers the same, then resets the connection 200 ms later.
   */
  serve(
    where: 'agent' | 'upstream',
    listen: { host: string; port: number; banner?: boolean; hold?: boolean; reset?: boolean }[],
  ): Promise<void>;
  /** Every message the lab resolver received so far (its own log; empty when built with dnsLog: false). */
  dnsQueries(): LabDnsQuery[];
}

export interface LabOptions extends Omit<DemoLabOptions, 'upstream' | 'probe' | 'enforcerCommand'> {
  /** Soak: a TLS port in the upstream namespace whose connections stay open and echo (LabUpstreamConfig.holdTls). */
  holdTls?: number;
  /** Bench: a bulk source port in the upstream namespace (see LabUpstreamConfig.bulk). */
  bulk?: { port: number; bytes: number };
  /**
   * Extra DNS records only (name -> addresses), on no interface: names whose answers point where the lab must never
   * connect (loopback, link-local, private ranges), so a test can show the proxy refuses before connecting.
   */
  names?: Record<string, string[]>;
  /** Log every message the lab resolver receives (default true; a benchmark turns it off). */
  dnsLog?: boolean;
}

const UPSTREAM = 'tests/lab/upstream.js';
const PROBE = 'tests/lab/probe.js';

function serveScript(listen: Parameters<Lab['serve']>[1]): string {
  return `
const net = require('node:net');
const spec = ${JSON.stringify(listen)};
let up = 0;
for (const l of spec) {
  const srv = net.createServer((s) => {
    s.on('error', () => {});
    if (l.hold) return;
    if (l.reset) { s.write('svc:' + l.port + '\\n'); setTimeout(() => s.resetAndDestroy(), 200); return; }
    if (l.banner) { s.write('220 banner\\r\\n'); setTimeout(() => s.end(), 100); }
    else s.end('svc:' + l.port + '\\n');
  });
  srv.listen(l.port, l.host, () => { if (++up === spec.length) process.stdout.write('ready\\n'); });
}`;
}

/** Builds the lab. On failure everything made so far is torn down before the error is rethrown. */
export async function buildLab(opts: LabOptions): Promise<Lab> {
  const dist = path.dirname(distSrc());
  for (const f of [UPSTREAM, PROBE])
    if (!fs.existsSync(path.join(dist, f))) throw new Error(`lab scripts not built: run "npm run build" (no ${f})`);
  const { holdTls, bulk, names, dnsLog, ...rest } = opts;
  const lab = await buildDemoLab<Probe>({
    ...rest,
    probe: [PROBE],
    enforcerCommand: (spec: LabEnforcerSpec, [node, ...rest]) => [
      ...(spec.nofile ? ['prlimit', `--nofile=${spec.nofile}:${spec.nofile}`, '--'] : []),
      node!,
      // e.g. LEASH_LAB_NODE_ARGS=--cpu-prof to profile the enforcer under a benchmark
      ...(process.env.LEASH_LAB_NODE_ARGS?.split(' ').filter(Boolean) ?? []),
      ...rest,
    ],
    upstream: {
      script: UPSTREAM,
      config: (dir, base): LabUpstreamConfig => ({
        ...base,
        names: { ...base.names, ...names },
        holdTls,
        bulk,
        ...(dnsLog === false ? {} : { dnsLog: path.join(dir, 'dns-queries.jsonl') }),
      }),
    },
  });
  return {
    ...lab,
    dnsQueries() {
      const file = path.join(lab.dir, 'dns-queries.jsonl');
      if (!fs.existsSync(file)) return [];
      return fs
        .readFileSync(file, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as LabDnsQuery);
    },
    async serve(where, listen) {
      const ns = where === 'agent' ? lab.agentNs : lab.upstreamNs;
      const argv = ['ip', 'netns', 'exec', ns, process.execPath, '-e', serveScript(listen)];
      const { child } = await spawnReady(argv, 'lab service');
      lab.defer(`stop lab service pid ${child.pid}`, () => stopChild(child));
    },
  };
}
