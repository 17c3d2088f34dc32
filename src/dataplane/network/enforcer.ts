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
import type { FailMode, Surface, SurfaceStatus, Withdrawn } from '../contract.js';

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
  /** A failure on close (releasing chains, the sweep after), for the service's log. */
  error?: (err: unknown, msg: string) => void;
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

/** New subjects whose listeners open side by side (a bound on the descriptors being opened at once). */
const LISTEN_BATCH = 64;

/**
 * The service's network surface (src/dataplane/contract.ts): nft chains per UID plus one proxy listener and one DNS
 * forwarder per UID. Opens the listeners first, then applies the chains: a redirected connection always finds its
 * listener. deny keeps or puts in a subject's chain behind listeners that refuse with `no_policy` (let through under
 * fail_mode open); orphan keeps the chain and refuses the same way; close releases every chain before the listeners go.
 */
export class NetworkEnforcer<P> implements Surface<NetworkSubjectSpec<P>> {
  readonly surface = 'network' as const;
  /** UIDs this enforcer holds a chain for (what stop releases). */
  private readonly applied = new Set<number>();
  /** UIDs whose listeners hold a policy (what `leash status` reports). */
  private readonly enforced = new Set<number>();

  constructor(
    readonly firewall: Firewall,
    readonly proxy: Proxy<P>,
    readonly dns: DnsForwarder<P>,
    private readonly opts: NetworkEnforcerOptions<P>,
  ) {}

  private dnsPortOf(s: { port: number; dnsPort?: number }): number {
    return s.dnsPort ?? dnsPortFor(s.port);
  }

  /** Every subject's listener, then one nft transaction for all their chains; the error of each that failed. */
  async apply(list: NetworkSubjectSpec<P>[]): Promise<Map<number, Error>> {
    const errors = new Map<number, Error>();
    for (const [uid, r] of await this.setSubjects(list)) if (r instanceof Error) errors.set(uid, r);
    for (const s of list) if (!errors.has(s.uid)) this.enforced.add(s.uid);
    return errors;
  }

  async deny(w: Withdrawn): Promise<void> {
    this.enforced.delete(w.uid);
    await this.denySubject(w.uid, w.port);
  }

  async orphan(w: Withdrawn): Promise<void> {
    this.enforced.delete(w.uid);
    await this.orphanSubject(w.uid, w.port);
  }

  setFailMode(m: FailMode): void {
    this.proxy.setFailMode(m);
    this.dns.setFailMode(m);
  }

  enforcing(): SurfaceStatus {
    return { surface: 'network', subjects: this.enforced.size, uids: [...this.enforced] };
  }

  /**
   * stop, then a sweep of whatever this enforcer's own bookkeeping missed (a pass cut short, an apply that failed
   * half-way): a service's close leaves no UID redirected, as ExecStopPost=leash teardown.
   */
  async close(): Promise<void> {
    const error = this.opts.error ?? ((e: unknown, m: string) => this.opts.warn?.(`${m}: ${(e as Error).message}`));
    await this.stop().catch((e: unknown) => error(e, 'network release failed'));
    const left = await teardownNetwork(this.opts.runner).catch((e: unknown) => {
      error(e, 'network teardown failed');
      return [] as number[];
    });
    if (left.length) this.opts.warn?.(`released chains the enforcer no longer tracked: uids ${left.join(', ')}`);
  }

  /** One subject's listener, then its chain. */
  async setSubject(s: NetworkSubjectSpec<P>): Promise<ApplyOutcome> {
    const r = (await this.setSubjects([s])).get(s.uid)!;
    if (r instanceof Error) throw r;
    return r;
  }

  /**
   * setSubject for many subjects: every listener first, then all their chains in one transaction.
   * Per-subject results; a subject whose listener or chain failed has its error.
   */
  async setSubjects(list: NetworkSubjectSpec<P>[]): Promise<Map<number, ApplyOutcome | Error>> {
    const out = new Map<number, ApplyOutcome | Error>();
    const ready: NetworkSubjectSpec<P>[] = [];
    const listen = async (s: NetworkSubjectSpec<P>) => {
      try {
        await this.proxy.setSubject(s);
        await this.dns.setSubject({
          uid: s.uid,
          port: this.dnsPortOf(s),
          policy: s.policy,
          resolvers: s.resolvers ?? this.opts.resolvers,
        });
        ready.push(s);
      } catch (e) {
        out.set(s.uid, e as Error);
      }
    };
    // Listeners before chains: a redirect must find its listener. A subject with listeners open (a new policy, or
    // a port that moves and frees one) goes first, one at a time; then the new ones, LISTEN_BATCH side by side
    // (each waits on its listens' callbacks: one after the other, a start at 1,000 subjects waited 6,000 in a row).
    const open = this.proxy.ports();
    const fresh: NetworkSubjectSpec<P>[] = [];
    for (const s of list) {
      if (open.has(s.uid)) await listen(s);
      else fresh.push(s);
    }
    for (let i = 0; i < fresh.length; i += LISTEN_BATCH)
      await Promise.all(fresh.slice(i, i + LISTEN_BATCH).map(listen));
    const results = await this.firewall.applyMany(
      ready.map((s) => ({
        uid: s.uid,
        port: s.port,
        dnsPort: this.dnsPortOf(s),
        udp: s.udp ?? this.opts.udp,
      })),
    );
    for (const [uid, r] of results) {
      out.set(uid, r);
      if (!(r instanceof Error)) this.applied.add(uid);
    }
    return out;
  }

  /** Releases the chain first, then closes the listener. */
  async releaseSubject(uid: number): Promise<void> {
    await this.firewall.release([uid]);
    this.applied.delete(uid);
    await this.proxy.removeSubject(uid);
    await this.dns.removeSubject(uid);
  }

  /**
   * A subject that cannot be resolved fails closed: its listener (re)opens with no policy, refusing everything
   * with `no_policy` (allowing it under fail_mode open), and its chain is kept or put in (with the enforcer's
   * udp/resolvers), so its TCP never leaves unjudged. A subject with no port (the pool is exhausted) or whose
   * listener cannot open (another process holds its port) is sealed: a redirect would find nothing of ours, or that
   * other process's socket, so its chain refuses everything instead, whatever fail_mode says.
   */
  async denySubject(uid: number, port: number | null): Promise<void> {
    if (port === null) {
      await this.proxy.removeSubject(uid);
      await this.dns.removeSubject(uid);
      await this.seal(uid);
      return;
    }
    // Listeners first (refusing), then the chain: a redirect always finds a listener that says no.
    try {
      await this.proxy.setSubject({ uid, port, policy: null });
      await this.dns.setSubject({ uid, port: dnsPortFor(port), policy: null, resolvers: this.opts.resolvers });
    } catch (e) {
      // Sealed, the subject is denied as asked (its failure is already the caller's); unsealed, say why.
      if (!(await this.seal(uid))) throw e;
      return;
    }
    await this.firewall.apply({ uid, port, dnsPort: dnsPortFor(port), udp: this.opts.udp });
    this.applied.add(uid);
  }

  /**
   * Puts `uid` behind a sealed chain (nothing leaves); false where that failed (the iptables fallback cannot seal),
   * and then its rules go, as before sealing existed.
   */
  private async seal(uid: number): Promise<boolean> {
    try {
      await this.firewall.apply({ uid, port: 0, dnsPort: 0, udp: 'drop', sealed: true });
      this.applied.add(uid);
      return true;
    } catch {
      await this.firewall.release([uid]);
      this.applied.delete(uid);
      return false;
    }
  }

  /** A subject that left discovery: its chain is kept (the UID may still run), its listener refuses everything. */
  async orphanSubject(uid: number, port: number | null): Promise<void> {
    if (port !== null) {
      await this.proxy.setSubject({ uid, port, policy: null });
      await this.dns.setSubject({ uid, port: dnsPortFor(port), policy: null, resolvers: this.opts.resolvers });
    }
  }

  /** Releases every subject this enforcer applied and closes the proxy. */
  async stop(): Promise<void> {
    try {
      if (this.applied.size) await this.firewall.release([...this.applied]);
      this.applied.clear();
    } finally {
      await this.proxy.close();
      await this.dns.close();
    }
  }
}

/** Opens the firewall (nft, or the one-UID iptables fallback) and creates the proxy and the DNS forwarder. */
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
  return new NetworkEnforcer(firewall, proxy, dns, opts);
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
