/**
 * The network lab of `leash demo`: an agent namespace and an upstream namespace joined by a veth pair, on
 * 198.18.0.0/15 and 2001:db8::/32. The upstream namespace carries HTTP/TLS servers that report which name and
 * address each connection reached, and a DNS server the proxy (and the agent) resolve through. tests/lab/netns.ts
 * builds the tests' and benches' lab on it (its own upstream and probe scripts). Everything it makes is registered
 * for teardown as soon as it exists; `teardown()` undoes it in reverse order and never throws.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { PolicyInput } from '../../engine/types.js';
import type { DecisionRecord } from '../../log/decisions.js';
import { hostRunner, netnsRunner, type Runner } from '../../dataplane/network/nft/run.js';
import { createCleanups, must, spawnReady, stopChild, type Cleanups } from './children.js';
import type { StandaloneSpec } from '../../dataplane/network/standalone.js';
import type { Probe, ProbeResult } from './probe.js';
import type { UpstreamConfig } from './upstream.js';

export { createCleanups, stopChild, type Cleanups } from './children.js';

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
}

export interface Lab<P = Probe> {
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
  /** The probe script the accounts run (a copy they can read). */
  probeScript: string;
  /** Runs probes as `user` (or as root when null) inside the agent namespace. */
  probe(user: LabUser | null, probes: P[]): Promise<ProbeResult[]>;
  teardown(): Promise<string[]>;
}

const here = path.dirname(fileURLToPath(import.meta.url));

/** dist/src: where the compiled scripts live (the lab runs them as separate processes in the namespaces). */
export function distSrc(): string {
  const marker = `${path.sep}dist${path.sep}src${path.sep}`;
  const i = here.lastIndexOf(marker);
  if (i >= 0) return here.slice(0, i + marker.length - 1);
  const root = path.resolve(here, '..', '..', '..');
  const d = path.join(root, 'dist', 'src');
  if (!fs.existsSync(path.join(d, 'cli', 'demo', 'upstream.js')))
    throw new Error(`lab scripts not built: run "npm run build" (looked in ${d})`);
  return d;
}

export interface LabOptions {
  /** Unique per helper and run: namespaces are lt-<id>-a / lt-<id>-u. */
  id: string;
  hosts?: LabHost[];
  /** The caller's cleanup registry (so a Ctrl-C during the build can still undo what exists so far). */
  cleanups?: Cleanups;
  /** The upstream script (relative to dist/) and its config (default: the demo's upstream.js, names of `hosts`). */
  upstream?: { script: string; config: (dir: string, base: UpstreamConfig) => UpstreamConfig };
  /** The probe scripts (relative to dist/), copied for the accounts; the first is run (default: the demo's). */
  probe?: string[];
  /** The enforcer's command line from its node command (default: as it is). */
  enforcerCommand?: EnforcerCommand;
}

export type EnforcerCommand = (spec: LabEnforcerSpec, node: string[]) => string[];

/** The lab's DNS records: each named host's two addresses. */
export function namesOf(hosts: LabHost[]): Record<string, string[]> {
  const names: Record<string, string[]> = {};
  for (const h of hosts) if (h.name) names[h.name] = [h.v4, h.v6];
  return names;
}

const DEMO_PROBE = 'src/cli/demo/probe.js';

type Defer = Cleanups['defer'];

/**
 * The two namespaces, joined by a veth pair created inside them (nothing appears in the host's own), with the lab's
 * addresses, the upstream hosts on the upstream's lo, and static neighbours.
 */
async function wireNamespaces(host: Runner, agentNs: string, upstreamNs: string, hosts: LabHost[], defer: Defer) {
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
}

/**
 * The upstream's HTTP/TLS/DNS servers (upstream.ts) in their namespace, and the probe scripts the accounts run
 * (copied, with a package.json that makes them ES modules, where the accounts can read them): returns the one to run.
 */
async function startUpstream(
  opts: LabOptions,
  dir: string,
  upstreamNs: string,
  hosts: LabHost[],
  defer: Defer,
): Promise<string> {
  const host = hostRunner();
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
  const base: UpstreamConfig = {
    cert,
    key,
    httpPorts: LAB.httpPorts,
    tlsPorts: LAB.tlsPorts,
    dns: [LAB.dnsV4, LAB.dnsV6, ...(hosts.some((h) => h.v4 === LAB.rogueDnsV4) ? [LAB.rogueDnsV4] : [])],
    names: namesOf(hosts),
  };
  const upCfg = opts.upstream ? opts.upstream.config(dir, base) : base;
  const upCfgPath = path.join(dir, 'upstream.json');
  fs.writeFileSync(upCfgPath, JSON.stringify(upCfg));
  const dist = path.dirname(distSrc());
  const script = path.join(dist, opts.upstream?.script ?? 'src/cli/demo/upstream.js');
  const up = await spawnReady(
    ['ip', 'netns', 'exec', upstreamNs, process.execPath, script, upCfgPath],
    'lab upstream servers',
  );
  defer(`stop upstream pid ${up.child.pid}`, () => stopChild(up.child));
  const probes = path.join(dir, 'probe');
  const files = opts.probe ?? [DEMO_PROBE];
  for (const f of new Set([...files, DEMO_PROBE])) {
    fs.mkdirSync(path.dirname(path.join(probes, f)), { recursive: true, mode: 0o755 });
    fs.copyFileSync(path.join(dist, f), path.join(probes, f));
    fs.chmodSync(path.join(probes, f), 0o644);
  }
  fs.writeFileSync(path.join(probes, 'package.json'), '{"type":"module"}\n', { mode: 0o644 });
  return path.join(probes, files[0]!);
}

/** The network enforcer (dataplane/network/standalone.ts) in the agent namespace, as root. */
async function startEnforcer(
  dir: string,
  agentNs: string,
  spec: LabEnforcerSpec,
  defer: Defer,
  command: EnforcerCommand = (_spec, node) => node,
): Promise<EnforcerHandle> {
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
      ...command(spec, [process.execPath, path.join(distSrc(), 'dataplane', 'network', 'standalone.js'), specPath]),
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
}

/** Builds the lab. On failure everything made so far is torn down before the error is rethrown. */
export async function buildLab<P = Probe>(opts: LabOptions): Promise<Lab<P>> {
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

  let probeScript: string;
  try {
    await wireNamespaces(host, agentNs, upstreamNs, hosts, defer);

    // `ip netns exec` bind-mounts /etc/netns/<ns>/resolv.conf over /etc/resolv.conf: the agent resolves via the lab.
    const etc = path.join('/etc/netns', agentNs);
    fs.mkdirSync(etc, { recursive: true });
    defer(`rm ${etc}`, () => fs.rmSync(etc, { recursive: true, force: true }));
    fs.writeFileSync(path.join(etc, 'resolv.conf'), `nameserver ${LAB.dnsV4}\nnameserver ${LAB.dnsV6}\n`);

    probeScript = await startUpstream(opts, dir, upstreamNs, hosts, defer);
  } catch (e) {
    await teardown();
    throw e;
  }

  const lab: Lab<P> = {
    id,
    agentNs,
    upstreamNs,
    dir,
    resolvers: [LAB.dnsV4, LAB.dnsV6],
    agent,
    upstream,
    defer,
    teardown,
    probeScript,
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
    startEnforcer: (spec) => startEnforcer(dir, agentNs, spec, defer, opts.enforcerCommand),
    async probe(user, probes) {
      const argv = user
        ? ['setpriv', `--reuid=${user.uid}`, `--regid=${user.gid}`, '--clear-groups', process.execPath, probeScript]
        : [process.execPath, probeScript];
      const r = await must(agent, [...argv, JSON.stringify(probes)]);
      const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as { uid: number; results: ProbeResult[] };
      if (user && out.uid !== user.uid) throw new Error(`probe ran as uid ${out.uid}, not ${user.uid}`);
      return out.results;
    },
  };
  return lab;
}
