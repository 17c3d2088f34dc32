/**
 * A connection's verdict: pure steps that both ways in (arrival-native.ts, the acceptor's descriptors, and
 * arrival-stream.ts, net.Sockets) call, so the two can never judge the same arrival differently. In: the subject's
 * compiled policy and what arrived (original destination, peeked name, resolved addresses); out: what to do and the
 * decision line's fields. No I/O: the caller reads, resolves, asks and relays.
 */
import net from 'node:net';
import type { FailMode, NetworkSubject, Reason, Verdict } from '../../../engine/types.js';
import { logAction } from '../../../engine/decide.js';
import { approvalOf, type AskOutcome } from '../../../engine/approval.js';
import type { PROXY_REASONS } from '../../../errors.js';
import type { DecisionRecord } from '../../../log/decisions.js';
import type { OriginalDst } from '../../../native.js';
import { PORT_MAX, PORT_MIN } from '../ports.js';
import type { GateRefusal } from './http-gate.js';
import type { PeekResult } from './peek.js';
import { plainIp, type Resolved } from './resolve.js';

/** The engine's decide, narrowed to the network surface; `P` is the compiled policy type. */
export type NetworkDecide<P> = (surface: 'network', subject: NetworkSubject, policy: P | null) => Verdict;

/** What a verdict reads of its subject. */
export interface SubjectPolicy<P> {
  decide: NetworkDecide<P>;
  /** null = no resolved policy: everything refused (or let through to the address asked for, fail_mode open). */
  policy: P | null;
  failMode: FailMode;
  ech: 'refuse' | 'allow';
}

/** A decision line without what the subject's entry supplies (uid, surface). */
export type Line = Omit<DecisionRecord, 'uid' | 'surface'>;

/** A refusal's decision line (action block). */
export type Refusal = Omit<DecisionRecord, 'uid' | 'surface' | 'action' | 'reason'> & {
  reason: keyof typeof PROXY_REASONS | Reason | AskOutcome['reason'];
};

/** A connection's arrival: where it was going and what its address alone decides. */
export interface Arrival {
  dst: OriginalDst;
  ip: string;
  isLoop: boolean;
  bare: NetworkSubject;
  early: Verdict;
}

export type Arrived = { refusal: Refusal } | { arrival: Arrival; byAddress: boolean };

/** What arrived, as the way in read it. */
export interface ArrivalInput {
  /** The original destination, or the errno name reading it failed with. */
  dst: OriginalDst | { error: string | undefined };
  local: { address: string; port: number };
  peer: { address: string; port: number };
  /** True for an address:port the proxy itself listens on. */
  isListener: (dst: OriginalDst) => boolean;
  /** This host's own interface addresses. */
  own: ReadonlySet<string>;
}

/** An allow on its way to a destination. */
export interface Allowed {
  subject: NetworkSubject;
  verdict: Verdict;
  /** The peeked name (SNI, Host), null when none. */
  domain: string | null;
  ech: boolean;
  /** Plain HTTP: the Host of the first request (null: none), for the request gate. */
  httpHost?: string | null;
  approval?: DecisionRecord['approval'];
}

/** What the first bytes decide. `notes` are lines written before the action's own (shadow mode's would_block). */
export type PeekAction = { notes: Line[] } & (
  | { do: 'refuse'; line: Refusal }
  /** Relay on the upstream already connected by address. */
  | { do: 'early'; allow: Allowed; line: Line }
  /** Hold for the approvals queue (an upstream connected by address is dropped). */
  | { do: 'ask'; allow: Allowed }
  | { do: 'allow'; allow: Allowed }
);

/** Where an allow goes: its target address and its line, or a refusal. */
export type Destination = { notes: Line[] } & (
  { do: 'refuse'; line: Refusal } | { do: 'relay'; target: string; line: Line }
);

/**
 * A listener without a resolved policy refuses everything (or, under fail_mode open, lets it through to the address
 * asked for); it never borrows a default or another subject's policy. A decide that throws is `engine_error`.
 */
export function judge<P>(s: SubjectPolicy<P>, subject: NetworkSubject): Verdict {
  if (s.policy === null) {
    const open = s.failMode === 'open';
    return { action: open ? 'allow' : 'block', reason: 'no_policy', source: 'fail_mode', rule: null };
  }
  try {
    return s.decide('network', subject, s.policy);
  } catch {
    return { action: 'block', reason: 'engine_error', source: 'fail_mode', rule: null };
  }
}

/** Shadow mode on a subject's policy (the engine's CompiledPolicy carries it; any other policy type is enforced). */
export function isShadow(p: unknown): boolean {
  return typeof p === 'object' && p !== null && (p as { shadow?: unknown }).shadow === true;
}

/** True when the entry that decided is an address rule (IP, CIDR, ip:port, [v6]:port) rather than a name. */
export function isAddressRule(rule: string | null): boolean {
  if (!rule) return false;
  if (rule.startsWith('[')) return true;
  const host = rule.includes('/') ? rule.slice(0, rule.indexOf('/')) : rule;
  if (net.isIP(host)) return true;
  const m = /^(.*):(\d+)$/.exec(host);
  return !!m && net.isIPv4(m[1]!);
}

/**
 * A destination on this host, whatever it is called (already plain: no ::ffff: prefix): 127.0.0.0/8 and ::1,
 * the unspecified 0.0.0.0 and :: (a connect there reaches a local service), and the host's own interface
 * addresses. All are judged as `localhost`: a local service is not reached under another name.
 */
export function isLoopback(ip: string, own: ReadonlySet<string>): boolean {
  return ip.startsWith('127.') || ip === '::1' || ip === '0.0.0.0' || ip === '::' || own.has(ip);
}

/** An entry naming localhost (`localhost`, `localhost:3000`): on a loopback destination it decides by address. */
function isLocalhostRule(rule: string): boolean {
  return /^localhost(:\d+)?$/i.test(rule);
}

/**
 * What a connection's arrival decides: a refusal when it did not provably come through the redirect
 * (no_original_dst, not_redirected: no policy is consulted), else its address's verdict. A loopback address is also
 * the name `localhost`. When the address already allows, the name cannot widen it, so the upstream may be connected
 * at once (`byAddress`) and a server that speaks first (SSH, SMTP, a database) gets its banner through without
 * waiting for the peek; the peek still runs, for deny entries on a name, ECH, and the plain-HTTP gate.
 */
export function arrivalVerdict<P>(s: SubjectPolicy<P>, a: ArrivalInput): Arrived {
  const peer = `${plainIp(a.peer.address)}:${a.peer.port}`;
  if ('error' in a.dst) {
    const listener = `${plainIp(a.local.address)}:${a.local.port}`;
    return {
      refusal: {
        reason: 'no_original_dst',
        subject: { peer, listener, error: a.dst.error },
        rule: null,
        severity: 'critical',
      },
    };
  }
  const dst = a.dst;
  const ip = plainIp(dst.address);
  const isLoop = isLoopback(ip, a.own);
  if (
    (plainIp(a.local.address) === ip && a.local.port === dst.port) ||
    a.isListener(dst) ||
    (isLoop && dst.port >= PORT_MIN && dst.port <= PORT_MAX)
  ) {
    // A direct connection to a listener (own or another subject's): judging it would let one agent borrow
    // another's egress policy by guessing a port.
    return {
      refusal: { reason: 'not_redirected', subject: { ip, port: dst.port, peer }, rule: null, severity: 'critical' },
    };
  }
  const bare: NetworkSubject = { domain: isLoop ? 'localhost' : null, ip, port: dst.port };
  const early = judge(s, bare);
  // A loopback destination is judged as localhost and its address only: a name the agent sends cannot carry it
  // anywhere else, so a refusal needs no peek either.
  if (early.action === 'block' && (isLoop || early.reason === 'deny_entry' || early.reason === 'no_policy'))
    return { refusal: { reason: early.reason, subject: bare, rule: early.rule } };
  // A shadowed block is never connected early: the name may still allow it for real (and log it so).
  const byAddress =
    early.action === 'allow' &&
    !early.wouldBlock &&
    (early.rule === null || isAddressRule(early.rule) || (isLoop && isLocalhostRule(early.rule)));
  return { arrival: { dst, ip, isLoop, bare, early }, byAddress };
}

/**
 * What a connection's first bytes decide, its arrival already judged. `connected`: an upstream was connected by
 * address at arrival; a name can then only add a deny, or (a blacklist's ask entry) a question, for which that
 * upstream (nothing sent on it) is dropped and a fresh one made if it is approved.
 */
export function peekVerdict<P>(s: SubjectPolicy<P>, a: Arrival, result: PeekResult, connected: boolean): PeekAction {
  const { dst, ip, bare, early } = a;
  const notes: Line[] = [];
  let domain: string | null = null;
  if (result.kind === 'tls') {
    domain = result.sni;
    if (result.ech && s.ech === 'refuse') {
      const subject = { domain, ip, port: dst.port, ech: true };
      if (!isShadow(s.policy)) return { notes, do: 'refuse', line: { reason: 'ech_refused', subject, rule: null } };
      notes.push({ action: 'would_block', reason: 'ech_refused', subject, rule: null });
    }
  } else if (result.kind === 'http') {
    if (result.conflict) {
      const subject = { domain: result.host, ip, port: dst.port };
      return { notes, do: 'refuse', line: { reason: 'ambiguous_host', subject, rule: null } };
    }
    domain = result.host;
  }
  const subject: NetworkSubject = { domain: domain ?? bare.domain, ip, port: dst.port };
  const ech = result.kind === 'tls' && result.ech === true;
  const httpHost = result.kind === 'http' ? { httpHost: result.host } : {};
  const verdict = connected && domain === null ? early : judge(s, subject);
  if (connected && verdict.action === 'block' && verdict.reason === 'deny_entry')
    return { notes, do: 'refuse', line: { reason: verdict.reason, subject, rule: verdict.rule } };
  if (connected && verdict.action !== 'ask') {
    const allow: Allowed = { subject, verdict: early, domain, ech, ...httpHost };
    return { notes, do: 'early', allow, line: relayLine(allow, ip) };
  }
  const allow: Allowed = { subject, verdict, domain, ech, ...httpHost };
  if (verdict.action === 'ask') return { notes, do: 'ask', allow };
  if (verdict.action === 'block')
    return { notes, do: 'refuse', line: { reason: verdict.reason, subject, rule: verdict.rule } };
  return { notes, do: 'allow', allow };
}

/** The approvals queue's outcome for a held connection: it decides as a verdict of the ask entry. */
export function askedVerdict(asked: Allowed, o: AskOutcome): PeekAction {
  const approval = approvalOf(o);
  const verdict: Verdict = { action: o.action, reason: o.reason as Reason, source: 'ask', rule: asked.verdict.rule };
  if (verdict.action === 'block')
    return {
      notes: [],
      do: 'refuse',
      line: { reason: verdict.reason, subject: asked.subject, rule: verdict.rule, approval },
    };
  return { notes: [], do: 'allow', allow: { ...asked, verdict, approval } };
}

/**
 * The name an allow's destination depends on, or null when it goes to the address asked for: an address entry or a
 * mode default decided (it judged the address as well), or a shadowed block (no entry allowed the name, so no
 * resolution vouches for it).
 */
export function nameToResolve(a: Allowed): string | null {
  if (a.verdict.wouldBlock || !a.domain || a.verdict.rule === null || isAddressRule(a.verdict.rule)) return null;
  return a.domain;
}

/**
 * Where an allowed connection goes. A name-decided one goes where the name resolved (`resolved`: through the proxy's
 * resolvers, or as the subject's own DNS answers said), never to the address the agent supplied, so a forged
 * SNI/Host cannot carry an allowed name to an arbitrary address; and that address is judged again: a deny entry
 * covering it wins, and a name never leads into a local or internal address no entry names (`rebind`).
 */
export function destinationVerdict<P>(
  s: SubjectPolicy<P>,
  a: Allowed,
  resolved: Resolved | null,
  own: ReadonlySet<string>,
): Destination {
  const { subject, verdict } = a;
  const ip = subject.ip!;
  const approval = a.approval ? { approval: a.approval } : {};
  const name = nameToResolve(a);
  if (name === null || resolved === null) return { notes: [], do: 'relay', target: ip, line: relayLine(a, ip) };
  const to = pickAddress(ip, resolved);
  if (to === null)
    return { notes: [], do: 'refuse', line: { reason: 'resolve_failed', subject, rule: verdict.rule, ...approval } };
  const again = judge(s, { domain: name, ip: to, port: subject.port, resolved: { own: own.has(to) } });
  const upstream = { ...subject, upstream: to };
  if (again.action === 'block')
    return {
      notes: [],
      do: 'refuse',
      line: { reason: again.reason, subject: upstream, rule: again.rule, ...approval },
    };
  const notes: Line[] = again.wouldBlock
    ? [{ action: 'would_block', reason: again.reason, subject: upstream, rule: again.rule }]
    : [];
  return { notes, do: 'relay', target: to, line: relayLine(a, to) };
}

/** `ip` (the address asked for) when the name resolves there, else the first of the same family (or any). */
function pickAddress(ip: string, r: Resolved): string | null {
  const all = [...r.v4, ...r.v6];
  if (all.includes(ip)) return ip;
  return (net.isIPv4(ip) ? r.v4 : r.v6)[0] ?? all[0] ?? null;
}

/** The line of a relayed connection. */
export function relayLine(a: Allowed, target: string): Line {
  const { subject, verdict } = a;
  return {
    action: logAction(verdict),
    reason: verdict.reason,
    subject: { ...subject, ...(a.ech ? { ech: true } : {}), ...(target === subject.ip ? {} : { upstream: target }) },
    rule: verdict.rule,
    ...(a.approval ? { approval: a.approval } : {}),
  };
}

/**
 * The line of a plain-HTTP request the gate refused after the first (another Host on a kept-alive connection, a
 * malformed request): `request` counts from 1.
 */
export function gateRefusalLine(a: Allowed, r: GateRefusal, request: number): Line {
  return {
    action: 'block',
    reason: r.reason,
    subject: {
      domain: r.reason === 'http_host_changed' ? r.host : a.httpHost,
      ip: a.subject.ip,
      port: a.subject.port,
      request,
      ...(r.reason === 'http_malformed' ? { why: r.why } : {}),
    },
    rule: null,
  };
}
