import fs from 'node:fs';
import net from 'node:net';
import { dnsPortFor } from './ports.js';
import {
  createDnsForwarder,
  type DnsAnswerDecide,
  type DnsDecide,
  type DnsForwarder,
  type DnsForwarderOptions,
} from './dns/forwarder.js';
import type { ApplyOutcome } from './nft/apply.js';
import { openFirewall, type Firewall } from './nft/firewall.js';
import type { DecisionWriter } from '../../log/decisions.js';
import { createProxy, type NetworkDecide, type Proxy, type ProxyOptions } from './proxy/proxy.js';
import type { Runner } from './nft/run.js';

/** The nameserver lines of a resolv.conf (IP literals only; a zone suffix `%eth0` is dropped). */
export function parseResolvConf(text: string): string[] {
  const out: string[] = [];
  for (const line of text.split('\n')) {
    const m = /^\s*nameserver\s+(\S+)/.exec(line);
    if (!m) continue;
    const ip = m[1]!.replace(/%.*$/, '');
    if (net.isIP(ip) && !out.includes(ip)) out.push(ip);
  }
  return out;
}

/** `network.dns_resolvers` when set, else the host's /etc/resolv.conf. */
export function hostResolvers(configured: string[], resolvConf = '/etc/resolv.conf'): string[] {
  if (configured.length) return configured;
  try {
    return parseResolvConf(fs.readFileSync(resolvConf, 'utf8'));
  } catch {
    return [];
  }
}

export interface NetworkSubjectSpec<P> {
  uid: number;
  port: number;
  policy: P | null;
  /** This subject's `network.udp` (default: the enforcer's). */
  udp?: 'drop' | 'allow';
  /** Where this subject's forwarder sends allowed queries (default: the enforcer's). */
  resolvers?: string[];
  /** This subject's `network.ech` (default refuse). */
  ech?: 'refuse' | 'allow';
  /** The subject's DNS forwarder port (default: the other half of its port pair, dnsPortFor(port)). */
  dnsPort?: number;
}

export interface NetworkEnforcerOptions<P> {
  runner: Runner;
  decide: NetworkDecide<P>;
  /** Judges a DNS query name (the engine's decideDnsName). */
  decideDns: DnsDecide<P>;
  /** Judges a DNS answer's addresses (the engine's decideDnsAnswer): the rebind rule. */
  decideDnsAnswer: DnsAnswerDecide<P>;
  log: DecisionWriter;
  resolvers: string[];
  udp: 'drop' | 'allow';
  /** How many subjects will be applied (the iptables fallback refuses more than one). */
  expectedSubjects: number;
  warn?: (msg: string) => void;
  proxy?: Partial<
    Pick<
      ProxyOptions<P>,
      | 'peekTimeoutMs'
      | 'peekBytes'
      | 'connectTimeoutMs'
      | 'onError'
      | 'hosts'
      | 'failMode'
      | 'maxConnections'
      | 'maxPerSubject'
      | 'errorWindowMs'
      | 'ask'
      | 'onSetup'
    >
  >;
  dns?: Partial<
    Pick<
      DnsForwarderOptions<P>,
      'refuse' | 'timeoutMs' | 'allowLinesPerSec' | 'onError' | 'hosts' | 'failMode' | 'onAnswer'
    >
  >;
}

export interface NetworkEnforcer<P> {
  readonly firewall: Firewall;
  readonly proxy: Proxy<P>;
  readonly dns: DnsForwarder<P>;
  /** Opens the listener first, then applies the chain: a redirected connection always finds its listener. */
  setSubject(s: NetworkSubjectSpec<P>): Promise<ApplyOutcome>;
  /**
   * setSubject for many subjects: every listener first, then all their chains in one transaction.
   * Per-subject results; a subject whose listener or chain failed has its error.
   */
  setSubjects(list: NetworkSubjectSpec<P>[]): Promise<Map<number, ApplyOutcome | Error>>;
  /** Releases the chain first, then closes the listener. */
  releaseSubject(uid: number): Promise<void>;
  /**
   * A subject that cannot be resolved fails closed: its listener (re)opens with no policy, refusing everything
   * with `no_policy` (allowing it under fail_mode open), and its chain is kept or put in (with the enforcer's
   * udp/resolvers), so its TCP never leaves unjudged. Without a port (the pool is exhausted) there is no listener
   * to redirect to: any chain is dropped and the listener closed.
   */
  denySubject(uid: number, port: number | null): Promise<void>;
  /** A subject that left discovery: its chain is kept (the UID may still run), its listener refuses everything. */
  orphanSubject(uid: number, port: number | null): Promise<void>;
  /** Releases every subject this enforcer applied and closes the proxy. */
  stop(): Promise<void>;
}

/** The service's network surface: nft chains per UID plus one proxy listener per UID. */
export async function startNetworkEnforcer<P>(opts: NetworkEnforcerOptions<P>): Promise<NetworkEnforcer<P>> {
  const firewall = await openFirewall({ runner: opts.runner, subjects: opts.expectedSubjects, warn: opts.warn });
  const dns = createDnsForwarder<P>({
    decide: opts.decideDns,
    decideAnswer: opts.decideDnsAnswer,
    log: opts.log,
    ...opts.dns,
  });
  const proxy = createProxy<P>({
    decide: opts.decide,
    log: opts.log,
    resolvers: opts.resolvers,
    seen: (uid, name) => dns.seen(uid, name),
    ...opts.proxy,
  });
  const dnsPortOf = (s: { port: number; dnsPort?: number }) => s.dnsPort ?? dnsPortFor(s.port);
  const applied = new Set<number>();
  const setSubjects = async (list: NetworkSubjectSpec<P>[]): Promise<Map<number, ApplyOutcome | Error>> => {
    const out = new Map<number, ApplyOutcome | Error>();
    const ready: NetworkSubjectSpec<P>[] = [];
    // Listeners before chains: a redirect must find its listener.
    for (const s of list) {
      try {
        await proxy.setSubject(s);
        await dns.setSubject({
          uid: s.uid,
          port: dnsPortOf(s),
          policy: s.policy,
          resolvers: s.resolvers ?? opts.resolvers,
        });
        ready.push(s);
      } catch (e) {
        out.set(s.uid, e as Error);
      }
    }
    const results = await firewall.applyMany(
      ready.map((s) => ({
        uid: s.uid,
        port: s.port,
        dnsPort: dnsPortOf(s),
        udp: s.udp ?? opts.udp,
      })),
    );
    for (const [uid, r] of results) {
      out.set(uid, r);
      if (!(r instanceof Error)) applied.add(uid);
    }
    return out;
  };
  return {
    firewall,
    proxy,
    dns,
    async setSubject(s) {
      const r = (await setSubjects([s])).get(s.uid)!;
      if (r instanceof Error) throw r;
      return r;
    },
    setSubjects,
    async releaseSubject(uid) {
      await firewall.release([uid]);
      applied.delete(uid);
      await proxy.removeSubject(uid);
      await dns.removeSubject(uid);
    },
    async denySubject(uid, port) {
      if (port === null) {
        await firewall.release([uid]);
        applied.delete(uid);
        await proxy.removeSubject(uid);
        await dns.removeSubject(uid);
        return;
      }
      // Listeners first (refusing), then the chain: a redirect always finds a listener that says no. A listener that
      // cannot open leaves nothing to redirect to: the chain goes (as it did before fail-closed chains).
      try {
        await proxy.setSubject({ uid, port, policy: null });
        await dns.setSubject({ uid, port: dnsPortFor(port), policy: null, resolvers: opts.resolvers });
      } catch (e) {
        await firewall.release([uid]);
        applied.delete(uid);
        throw e;
      }
      await firewall.apply({ uid, port, dnsPort: dnsPortFor(port), udp: opts.udp });
      applied.add(uid);
    },
    async orphanSubject(uid, port) {
      if (port !== null) {
        await proxy.setSubject({ uid, port, policy: null });
        await dns.setSubject({ uid, port: dnsPortFor(port), policy: null, resolvers: opts.resolvers });
      }
    },
    async stop() {
      try {
        if (applied.size) await firewall.release([...applied]);
        applied.clear();
      } finally {
        await proxy.close();
        await dns.close();
      }
    },
  };
}

/**
 * `leash teardown` for the network surface: releases `uids` (default: every UID holding leash rules); the tables go
 * when none remain. Returns the UIDs released.
 */
export async function teardownNetwork(runner: Runner, uids?: number[]): Promise<number[]> {
  const fw = await openFirewall({ runner, subjects: 1, warn: () => {} });
  const present = await fw.applied();
  const going = uids ? present.filter((u) => uids.includes(u)) : present;
  if (going.length) await fw.release(going);
  return going;
}
