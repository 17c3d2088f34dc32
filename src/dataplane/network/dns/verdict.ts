/**
 * A DNS query's verdict: pure steps the forwarder (forwarder.ts) calls for every query, over UDP and TCP alike. In:
 * the subject's compiled policy and what arrived (the parsed message, an upstream's answer); out: what to do (answer
 * with an error code and send nothing upstream, or forward) and the decision line's fields. No I/O.
 */
import type { Verdict } from '../../../engine/types.js';
import type { DecisionRecord } from '../../../log/decisions.js';
import type { OriginalDst } from '../../../native.js';
import { plainIp } from '../proxy/resolve.js';
import { RCODE, typeName, type Answer, type ParseResult, type Query } from './wire.js';

export type DnsDecide<P> = (name: string, policy: P | null) => Verdict;
/** Whether an answer for a name an entry allowed may carry an address (the engine's decideDnsAnswer). */
export type DnsAnswerDecide<P> = (name: string, ip: string, own: boolean, policy: P) => Verdict | null;

/** What a DNS verdict reads of its subject. */
export interface DnsPolicy<P> {
  decide: DnsDecide<P>;
  /** The rebind rule for answers (absent: answers are not judged). */
  decideAnswer?: DnsAnswerDecide<P>;
  /** null = no resolved policy: refused (`no_policy`), or forwarded under fail_mode open. */
  policy: P | null;
  failMode: 'closed' | 'open';
  /** What a refused name gets: RCODE.REFUSED or RCODE.NXDOMAIN. */
  refuseRcode: number;
}

export type Transport = 'udp' | 'tcp';

/** A decision line without what the subject's entry supplies (uid, surface). */
export type Line = Omit<DecisionRecord, 'uid' | 'surface'>;

/** An error answer: the id to answer, its rcode, and the question echoed (null: none). */
export interface ErrorReply {
  id: number;
  rcode: number;
  query: Query | null;
}

export type QueryAction =
  /** `reply` null: nothing is sent back (not even a header could be read). */
  { do: 'refuse'; line: Line; reply: ErrorReply | null } | { do: 'forward'; query: Query; verdict: Verdict };

/** The line's subject for a query. */
export function querySubject(q: Query, transport: Transport): Record<string, unknown> {
  return {
    dns: q.question.name.toLowerCase(),
    qtype: typeName(q.question.qtype),
    ...(transport === 'tcp' ? { transport } : {}),
  };
}

/**
 * A TCP connection's arrival: only one the chain redirected (original port 53) is served. A direct connection to
 * the forwarder's port, by the subject (its loopback TCP to 18000-20999 lands on its proxy instead) or by anyone
 * else, is refused: the refusal's line, or null to serve it.
 */
export function tcpArrivalVerdict(dst: OriginalDst | null, peer: { address: string; port: number }): Line | null {
  if (dst && dst.port === 53) return null;
  return {
    action: 'block',
    reason: dst ? 'not_redirected' : 'no_original_dst',
    subject: { dns: null, qtype: null, transport: 'tcp', peer: `${plainIp(peer.address)}:${peer.port}` },
    rule: null,
  };
}

/** One message from the subject, parsed strictly: refused (with what to answer), or forwarded. */
export function queryVerdict<P>(
  s: DnsPolicy<P>,
  parsed: ParseResult,
  bytes: number,
  transport: Transport,
): QueryAction {
  if (!parsed.ok) {
    const reason = parsed.rcode === RCODE.NOTIMP ? 'dns_unsupported' : 'dns_malformed';
    const subject = { dns: null, qtype: null, transport, bytes, why: parsed.why };
    return {
      do: 'refuse',
      line: { action: 'block', reason, subject, rule: null },
      reply: parsed.id === null ? null : { id: parsed.id, rcode: parsed.rcode, query: null },
    };
  }
  const q = parsed.query;
  const verdict = judgeName(s, q.question.name);
  if (verdict.action === 'block')
    return {
      do: 'refuse',
      line: { action: 'block', reason: verdict.reason, subject: querySubject(q, transport), rule: verdict.rule },
      reply: { id: q.id, rcode: s.refuseRcode, query: q },
    };
  return { do: 'forward', query: q, verdict };
}

/** A subject without a policy is refused (or forwarded under fail_mode open); a decide that throws is engine_error. */
function judgeName<P>(s: DnsPolicy<P>, name: string): Verdict {
  if (s.policy === null)
    return { action: s.failMode === 'open' ? 'allow' : 'block', reason: 'no_policy', source: 'fail_mode', rule: null };
  try {
    return s.decide(name, s.policy);
  } catch {
    return { action: 'block', reason: 'engine_error', source: 'fail_mode', rule: null };
  }
}

/**
 * An upstream's answer to a query an entry allowed: refused whole (`refuse`) when it leads the allowed name into a
 * local or internal address no entry names (the rebind rule); `lines` are the lines to write, in order (shadow
 * mode's would_block ones, then the block).
 */
export function answerVerdict<P>(
  s: DnsPolicy<P>,
  q: Query,
  verdict: Verdict,
  transport: Transport,
  a: Answer,
  own: ReadonlySet<string>,
): { refuse: boolean; lines: Line[] } {
  const lines: Line[] = [];
  const rule = verdict.rule;
  if (rule === null || s.policy === null || !s.decideAnswer) return { refuse: false, lines };
  for (const { address } of a.addresses) {
    const ip = plainIp(address);
    const v = s.decideAnswer(q.question.name, ip, own.has(ip), s.policy);
    if (v === null) continue;
    const subject = { ...querySubject(q, transport), address: ip };
    if (v.action === 'block') {
      lines.push({ action: 'block', reason: v.reason, subject, rule });
      return { refuse: true, lines };
    }
    lines.push({ action: 'would_block', reason: v.reason, subject, rule });
  }
  return { refuse: false, lines };
}
