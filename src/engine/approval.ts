/**
 * What an enforcer that holds an action needs from the approvals queue, as types only: the proxy,
 * the tools gate and (later) the watcher receive an `Asker` as a parameter, and the service's
 * queue (src/control/approvals/) is one. Imports nothing but the engine's types.
 */
import type { Surface } from './types.js';

/** How an approver decides: this action only, for the session, for good (an allow entry), or no. */
export type Decision = 'once' | 'session' | 'persist' | 'deny';
export const DECISIONS: readonly Decision[] = ['once', 'session', 'persist', 'deny'];

/** How an asked action ended (src/errors.ts APPROVAL_REASONS). Only `approved_*` is an allow. */
export type ApprovalReason =
  | 'approved_once'
  | 'approved_session'
  | 'approved_persist'
  | 'approval_denied'
  | 'approval_timeout'
  | 'approval_unavailable'
  | 'approval_limit'
  | 'approval_cancelled';

/** Who decided: the approver's UID (from SO_PEERCRED) and account name. */
export interface Approver {
  uid: number;
  account: string | null;
}

/** One question, as an enforcer asks it. Carries what a human needs to decide, and nothing more. */
export interface AskRequest {
  uid: number;
  surface: Surface;
  /**
   * What is asked about, shown to the approver: network `{domain, ip, port}`, filesystem `{path}`,
   * commands `{binary}`, tools `{name, arguments}` with the arguments already masked.
   */
  what: Record<string, unknown>;
  /**
   * The entry (or tools rule) that asked, and why: ask_entry (an ask entry), or for a tools call ask_rule
   * (an ask rule of tools.rules), operation_ask (tools.default ask), operation_unsure (an unknown or
   * ambiguous call under a default that would allow).
   */
  rule: string | null;
  reason?: 'ask_entry' | 'ask_rule' | 'operation_ask' | 'operation_unsure';
  /** Files and execs: the asking process's pid and command line. */
  pid?: number;
  cmdline?: string[];
  /**
   * What a `session` decision covers: later requests of the same subject, surface and key pass
   * without asking (tools: the gate keeps its own, bound to the tool's schema hash).
   */
  sessionKey: string;
  /** The allow entry a `persist` decision writes into the subject's agent profile; null: cannot persist. */
  persistEntry: string | null;
  /**
   * The enforcer keeps a `session` (or not yet reconciled `persist`) approval itself: the queue records
   * none. The tools gate does, bound to the tool's schema hash and ending when the gate exits.
   */
  keepSession?: boolean;
  /** Aborted by the enforcer when the action is gone (the connection closed, the gate exited). */
  signal?: AbortSignal;
  /** Overrides the surface's deadline (ms), e.g. a gate's own timeout is shorter. */
  deadlineMs?: number;
}

/** The answer an enforcer acts on; it writes the outcome's decision line with these fields. */
export interface AskOutcome {
  action: 'allow' | 'block';
  reason: ApprovalReason;
  /** The request's ID (null when none was queued: unavailable, over the limit, a session pass). */
  request: string | null;
  how?: Decision;
  by?: Approver;
}

/** The queue as an enforcer sees it. Never rejects: a failure inside is a block. */
export type Asker = (req: AskRequest) => Promise<AskOutcome>;

/** The `approval` member of an outcome's decision line: which request, who decided, how. */
export function approvalOf(o: AskOutcome): { request: string | null; how?: Decision; by?: Approver } {
  return { request: o.request, ...(o.how ? { how: o.how } : {}), ...(o.by ? { by: o.by } : {}) };
}
