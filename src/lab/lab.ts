/**
 * The network lab (docs: /work/shared/DESIGN.md "Test lab"): an agent namespace and an upstream namespace joined by a
 * veth pair, on 198.18.0.0/15 and 2001:db8::/32. The upstream namespace carries HTTP/TLS servers that report which
 * name and address each connection reached, and a DNS server the proxy (and the agent) resolve through. Used by
 * the integration tests, `leash demo` and bench/proxy. Everything it makes is registered for teardown as soon as it
 * exists; `teardown()` undoes it in reverse order and never throws.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { PolicyInput } from '../engine/types.js';
import type { DecisionRecord } from '../log/decisions.js';
import { hostRunner, netnsRunner, type RunResult, type Runner } from '../dataplane/network/nft/run.js';
import type { StandaloneSpec } from '../dataplane/network/standalone.js';
import type { Probe, ProbeResult } from './probe.js';
import type { UpstreamConfig } from './upstream.js';

export interface LabHost {
  name: string | null;
  v4: string;
  v6: string;
}

/** The lab's fixed addresses. */
export const LAB = {
  agentV4: '198.18.0.1',
  upstreamV4: '198.18.0.2',
  agentV6: '2001:db8::1',
  upstreamV6: '2001:db8::2',
  dnsV4: '198.18.1.53',
  dnsV6: '2001:db8:1::53',
  /** A second DNS listener on evil.lab's address: a server other than the configured resolver. */
  rogueDnsV4: '198.18.1.20',
  /** Upstream hosts (addresses on the upstream namespace's lo); the last has no name (reachable by address only). */
  hosts: [
    { name: 'good.lab', v4: '198.18.1.10', v6: '2001:db8:1::10' },
    { name: 'evil.lab', v4: '198.18.1.20', v6: '2001:db8:1::20' },
    { name: 'api.good.lab', v4: '198.18.1.11', v6: '2001:db8:1::11' },
    { name: 'other.lab', v4: '198.18.1.30', v6: '2001:db8:1::30' },
    { name: null, v4: '198.19.2.10', v6: '2001:db8:2::10' },
  ] as LabHost[],
  httpPorts: [80, 8080],
  tlsPorts: [443, 8443],
};

export interface LabUser {
  name: string;
  uid: number;
  gid: number;
}

export interface EnforcerHandle {
  pid: number;
  specPath: string;
  decisionsPath: string;
  /** Every decision line written so far. */
  decisions(): DecisionRecord[];
  /** Rewrites the spec and sends SIGHUP; resolves when the enforcer says it reloaded. */
  reload(spec: LabEnforcerSpec): Promise<void>;
  /** True while the enforcer process runs. */
  alive(): boolean;
  /** SIGTERM: the enforcer releases its chains and exits. Resolves with its exit code. */
  stop(): Promise<number | null>;
  stderr(): string;
}

export interface LabEnforcerSpec {
  subjects: { uid: number; port: number; policy: PolicyInput | null; ech?: 'refuse' | 'allow' }[];
  udp?: 'drop' | 'allow';
  peekTimeoutMs?: number;
  /** What a subject without a policy answers under (default closed). */
  failMode?: 'closed' | 'open';
  maxConnections?: number;
  maxPerSubject?: number;
  /** RLIMIT_NOFILE of the enforcer process (soft and hard; a descriptor-exhaustion test). */
  nofile?: number;
}

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

export interface Lab {
  id: string;
  agentNs: string;
  upstreamNs: string;
  dir: string;
  resolvers: string[];
  agent: Runner;
  upstream: Runner;
  /** Registers a cleanup step (run in reverse order by teardown). */
  defer(what: string, fn: () => unknown): void;
  createUser(name: string): Promise<LabUser>;
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
  /** Runs probes as `user` (or as root when null) inside the agent namespace. */
  probe(user: LabUser | null, probes: Probe[]): Promise<ProbeResult[]>;
  teardown(): Promise<string[]>;
}

const here = path.dirname(fileURLToPath(import.meta.url));

/** dist/src: where the compiled lab scripts live (the lab runs them as separate processes in the namespaces). */
export function distSrc(): string {
  const marker = `${path.sep}dist${path.sep}src${path.sep}`;
  const i = here.lastIndexOf(marker);
  if (i >= 0) return here.slice(0, i + marker.length - 1);
  const root = path.resolve(here, '..', '..');
  const d = path.join(root, 'dist', 'src');
  if (!fs.existsSync(path.join(d, 'lab', 'upstream.js')))
    throw new Error(`lab scripts not built: run "npm run build" (looked in ${d})`);
  return d;
}

async function must(runner: Runner, argv: string[], input?: string): Promise<RunResult> {
  const r = await runner(argv, input);
  if (r.code !== 0) throw new Error(`${argv.join(' ')} -> ${r.code}: ${r.stderr.trim()}`);
  return r;
}

function spawnReady(
  argv: string[],
  what: string,
  timeoutMs = 15_000,
): Promise<{ child: ChildProcess; err: () => string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    child.stderr!.setEncoding('utf8').on('data', (d: string) => {
      err += d;
      if (err.length > 65536) err = err.slice(-32768);
    });
    const rl = readline.createInterface({ input: child.stdout! });
    const timer = setTimeout(() => reject(new Error(`${what} not ready after ${timeoutMs} ms: ${err}`)), timeoutMs);
    rl.once('line', (line) => {
      clearTimeout(timer);
      if (line.trim() === 'ready') resolve({ child, err: () => err });
      else reject(new Error(`${what}: unexpected "${line}" ${err}`));
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited ${code}: ${err}`));
    });
  });
}

/** Stops a child we started, by its PID: SIGTERM, then SIGKILL after `graceMs`. */
export function stopChild(child: ChildProcess, graceMs = 5000): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => {
    const t = setTimeout(() => child.kill('SIGKILL'), graceMs);
    child.once('exit', (code) => {
      clearTimeout(t);
      resolve(code);
    });
    child.kill('SIGTERM');
  });
}

export interface LabOptions {
  /** Unique per helper and run: namespaces are lt-<id>-a / lt-<id>-u. */
  id: string;
  hosts?: LabHost[];
  /** Soak: a TLS port in the upstream namespace whose connections stay open and echo (UpstreamConfig.holdTls). */
  holdTls?: number;
  /** Bench: a bulk source port in the upstream namespace (see UpstreamConfig.bulk). */
  bulk?: { port: number; bytes: number };
  /**
   * Extra DNS records only (name -> addresses), on no interface: names whose answers point where the lab must never
   * connect (loopback, link-local, private ranges), so a test can show the proxy refuses before connecting.
   */
  names?: Record<string, string[]>;
  /** Log every message the lab resolver receives (default true; a benchmark turns it off). */
  dnsLog?: boolean;
  /** The caller's cleanup registry (so a Ctrl-C during the build can still undo what exists so far). */
  cleanups?: Cleanups;
}

/** A LIFO registry of undo steps. `run` never throws; it returns what failed. */
export interface Cleanups {
  defer(what: string, fn: () => unknown): void;
  run(): Promise<string[]>;
}

export function createCleanups(): Cleanups {
  const steps: { what: string; fn: () => unknown }[] = [];
  let running: Promise<string[]> | null = null;
  return {
    defer: (what, fn) => void steps.push({ what, fn }),
    run() {
      // A second call (Ctrl-C during teardown) waits for the first instead of racing it.
      running ??= (async () => {
        const problems: string[] = [];
        while (steps.length) {
          const c = steps.pop()!;
          try {
            await c.fn();
          } catch (e) {
            problems.push(`${c.what}: ${(e as Error).message}`);
          }
        }
        running = null;
        return problems;
      })();
      return running;
    },
  };
}

/** Builds the lab. On failure everything made so far is torn down before the error is rethrown. */
export async function buildLab(opts: LabOptions): Promise<Lab> {
  const host = hostRunner();
  const id = opts.id;
  const agentNs = `lt-${id}-a`;
  const upstreamNs = `lt-${id}-u`;
  const hosts = opts.hosts ?? LAB.hosts;
  const cleanups = opts.cleanups ?? createCleanups();
  const defer = cleanups.defer;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `leash-lab-${id}-`));
  fs.chmodSync(dir, 0o755);
  defer(`rm ${dir}`, () => fs.rmSync(dir, { recursive: true, force: true }));
  const agent = netnsRunner(agentNs);
  const upstream = netnsRunner(upstreamNs);

  const teardown = () => cleanups.run();

  try {
    for (const ns of [agentNs, upstreamNs]) {
      // A namespace left by a crashed earlier run of the same id would make `add` fail: remove it first.
      await host(['ip', 'netns', 'del', ns]);
      await must(host, ['ip', 'netns', 'add', ns]);
      defer(`ip netns del ${ns}`, () => must(host, ['ip', 'netns', 'del', ns]));
      await must(host, ['ip', '-n', ns, 'link', 'set', 'lo', 'up']);
      // No duplicate address detection in the lab: a tentative link-local address delays the first IPv6
      // neighbour solicitation by a second, which would show up as set-up time that is not Leash's.
      await must(host, [
        'ip',
        'netns',
        'exec',
        ns,
        'sysctl',
        '-qw',
        'net.ipv6.conf.all.accept_dad=0',
        'net.ipv6.conf.default.accept_dad=0',
        // A benchmark opens ~1000 connections/s for minutes: with the default range and no TIME_WAIT reuse the
        // namespace runs out of source ports and every path collapses together (measured: all three to ~100/s).
        'net.ipv4.ip_local_port_range=1024 65000',
        'net.ipv4.tcp_tw_reuse=1',
      ]);
    }
    // Both ends are created inside the namespaces: nothing ever appears in the host's own.
    await must(host, [
      'ip',
      '-n',
      agentNs,
      'link',
      'add',
      'veth0',
      'type',
      'veth',
      'peer',
      'name',
      'veth0',
      'netns',
      upstreamNs,
    ]);
    const sh = async (ns: string, cmds: string[][]) => {
      for (const c of cmds) await must(host, ['ip', '-n', ns, ...c]);
    };
    await sh(agentNs, [
      ['addr', 'add', `${LAB.agentV4}/24`, 'dev', 'veth0'],
      ['-6', 'addr', 'add', `${LAB.agentV6}/64`, 'dev', 'veth0', 'nodad'],
      ['link', 'set', 'veth0', 'up'],
      ['route', 'add', 'default', 'via', LAB.upstreamV4],
      ['-6', 'route', 'add', 'default', 'via', LAB.upstreamV6],
    ]);
    const upAddrs: string[][] = [];
    for (const h of [...hosts, { name: null, v4: LAB.dnsV4, v6: LAB.dnsV6 }]) {
      upAddrs.push(['addr', 'add', `${h.v4}/32`, 'dev', 'lo']);
      upAddrs.push(['-6', 'addr', 'add', `${h.v6}/128`, 'dev', 'lo', 'nodad']);
    }
    await sh(upstreamNs, [
      ['addr', 'add', `${LAB.upstreamV4}/24`, 'dev', 'veth0'],
      ['-6', 'addr', 'add', `${LAB.upstreamV6}/64`, 'dev', 'veth0', 'nodad'],
      ['link', 'set', 'veth0', 'up'],
      ...upAddrs,
    ]);

    // Static neighbour entries: the first IPv6 connection otherwise waits ~1 s for neighbour discovery (measured
    // here), which would show up as set-up time that is not Leash's.
    const mac = async (ns: string) =>
      (
        JSON.parse((await must(host, ['ip', '-n', ns, '-j', 'link', 'show', 'veth0'])).stdout) as { address: string }[]
      )[0]!.address;
    const [agentMac, upMac] = [await mac(agentNs), await mac(upstreamNs)];
    await sh(agentNs, [
      ['neigh', 'replace', LAB.upstreamV4, 'lladdr', upMac, 'dev', 'veth0', 'nud', 'permanent'],
      ['-6', 'neigh', 'replace', LAB.upstreamV6, 'lladdr', upMac, 'dev', 'veth0', 'nud', 'permanent'],
    ]);
    await sh(upstreamNs, [
      ['neigh', 'replace', LAB.agentV4, 'lladdr', agentMac, 'dev', 'veth0', 'nud', 'permanent'],
      ['-6', 'neigh', 'replace', LAB.agentV6, 'lladdr', agentMac, 'dev', 'veth0', 'nud', 'permanent'],
    ]);

    // `ip netns exec` bind-mounts /etc/netns/<ns>/resolv.conf over /etc/resolv.conf: the agent resolves via the lab.
    const etc = path.join('/etc/netns', agentNs);
    fs.mkdirSync(etc, { recursive: true });
    defer(`rm ${etc}`, () => fs.rmSync(etc, { recursive: true, force: true }));
    fs.writeFileSync(path.join(etc, 'resolv.conf'), `nameserver ${LAB.dnsV4}\nnameserver ${LAB.dnsV6}\n`);

    const key = path.join(dir, 'key.pem');
    const cert = path.join(dir, 'cert.pem');
    await must(host, [
      'openssl',
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-subj',
      '/CN=leash-lab',
      '-days',
      '1',
      '-keyout',
      key,
      '-out',
      cert,
    ]);
    const names: Record<string, string[]> = {};
    for (const h of hosts) if (h.name) names[h.name] = [h.v4, h.v6];
    Object.assign(names, opts.names ?? {});
    const upCfg: UpstreamConfig = {
      cert,
      key,
      httpPorts: LAB.httpPorts,
      tlsPorts: LAB.tlsPorts,
      dns: [LAB.dnsV4, LAB.dnsV6, ...(hosts.some((h) => h.v4 === LAB.rogueDnsV4) ? [LAB.rogueDnsV4] : [])],
      names,
      bulk: opts.bulk,
      holdTls: opts.holdTls,
      ...(opts.dnsLog === false ? {} : { dnsLog: path.join(dir, 'dns-queries.jsonl') }),
    };
    const upCfgPath = path.join(dir, 'upstream.json');
    fs.writeFileSync(upCfgPath, JSON.stringify(upCfg));
    const dist = distSrc();
    const up = await spawnReady(
      ['ip', 'netns', 'exec', upstreamNs, process.execPath, path.join(dist, 'lab', 'upstream.js'), upCfgPath],
      'lab upstream servers',
    );
    defer(`stop upstream pid ${up.child.pid}`, () => stopChild(up.child));
    // The probe runs as the leashed account: give it a copy it can read.
    fs.copyFileSync(path.join(dist, 'lab', 'probe.js'), path.join(dir, 'probe.mjs'));
    fs.chmodSync(path.join(dir, 'probe.mjs'), 0o644);
  } catch (e) {
    await teardown();
    throw e;
  }

  const lab: Lab = {
    id,
    agentNs,
    upstreamNs,
    dir,
    resolvers: [LAB.dnsV4, LAB.dnsV6],
    agent,
    upstream,
    defer,
    teardown,
    dnsQueries() {
      const file = path.join(dir, 'dns-queries.jsonl');
      if (!fs.existsSync(file)) return [];
      return fs
        .readFileSync(file, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as LabDnsQuery);
    },
    async createUser(name) {
      if (!/^leash-(t[a-z0-9-]{1,24}|demo)$/.test(name))
        throw new Error(`lab account name ${name} must be leash-t… or leash-demo`);
      // Left over from a crashed run: remove first so the uid/gid are ours.
      await host(['userdel', name]);
      await must(host, [
        'useradd',
        '--system',
        '--no-create-home',
        '--shell',
        '/usr/sbin/nologin',
        '--user-group',
        name,
      ]);
      defer(`userdel ${name}`, () => must(host, ['userdel', name]));
      const uid = Number((await must(host, ['id', '-u', name])).stdout.trim());
      const gid = Number((await must(host, ['id', '-g', name])).stdout.trim());
      return { name, uid, gid };
    },
    async startEnforcer(spec) {
      const specPath = path.join(dir, `enforcer-${Date.now()}.json`);
      const decisionsPath = path.join(dir, `decisions-${Date.now()}.jsonl`);
      const write = (s: LabEnforcerSpec) => {
        const full: StandaloneSpec = { ...s, resolvers: [LAB.dnsV4, LAB.dnsV6], decisions: decisionsPath };
        fs.writeFileSync(specPath, JSON.stringify(full));
      };
      write(spec);
      fs.writeFileSync(decisionsPath, '');
      const { child, err } = await spawnReady(
        [
          'ip',
          'netns',
          'exec',
          agentNs,
          ...(spec.nofile ? ['prlimit', `--nofile=${spec.nofile}:${spec.nofile}`, '--'] : []),
          process.execPath,
          // e.g. LEASH_LAB_NODE_ARGS=--cpu-prof to profile the enforcer under a benchmark
          ...(process.env.LEASH_LAB_NODE_ARGS?.split(' ').filter(Boolean) ?? []),
          path.join(distSrc(), 'dataplane', 'network', 'standalone.js'),
          specPath,
        ],
        'network enforcer',
      );
      defer(`stop enforcer pid ${child.pid}`, () => stopChild(child));
      const lines = readline.createInterface({ input: child.stdout! });
      const reloads: (() => void)[] = [];
      lines.on('line', (l) => {
        if (l.trim() === 'reloaded') reloads.shift()?.();
      });
      return {
        pid: child.pid!,
        specPath,
        decisionsPath,
        decisions: () =>
          fs
            .readFileSync(decisionsPath, 'utf8')
            .split('\n')
            .filter(Boolean)
            .map((l) => JSON.parse(l) as DecisionRecord),
        reload: (s) =>
          new Promise<void>((resolve) => {
            write(s);
            reloads.push(resolve);
            child.kill('SIGHUP');
          }),
        stop: () => stopChild(child),
        alive: () => child.exitCode === null && child.signalCode === null,
        stderr: err,
      };
    },
    async serve(where, listen) {
      const script = `
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
      const ns = where === 'agent' ? agentNs : upstreamNs;
      const { child } = await spawnReady(['ip', 'netns', 'exec', ns, process.execPath, '-e', script], 'lab service');
      defer(`stop lab service pid ${child.pid}`, () => stopChild(child));
    },
    async probe(user, probes) {
      const script = path.join(dir, 'probe.mjs');
      const argv = user
        ? ['setpriv', `--reuid=${user.uid}`, `--regid=${user.gid}`, '--clear-groups', process.execPath, script]
        : [process.execPath, script];
      const r = await must(agent, [...argv, JSON.stringify(probes)]);
      const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as { uid: number; results: ProbeResult[] };
      if (user && out.uid !== user.uid) throw new Error(`probe ran as uid ${out.uid}, not ${user.uid}`);
      return out.results;
    },
  };
  return lab;
}
