/**
 * The approvals queue: every action an enforcer holds for a human, in one bounded table with a
 * deadline each. Enforcers ask (`ask`, an Asker); approvers list, decide and subscribe (the socket in
 * ./socket.ts, later the console). Decided once: the first decision wins, a second is
 * `approval_not_found`. A deadline that passes is a block, never an allow; so is a stop.
 */
import crypto from 'node:crypto';
import type { Surface } from '../../engine/types.js';
import type { Approver, AskOutcome, AskRequest, Decision } from '../../engine/approval.js';
import { LeashError } from '../../errors.js';
import type { DecisionWriter } from '../../log/decisions.js';

/** The config's `approvals` section, as the queue reads it (seconds). */
export interface ApprovalSettings {
  deadlines: Record<Surface, number>;
  max_pending: number;
  max_pending_per_subject: number;
  session_seconds: number;
}

/** One pending request as an approver sees it (what a human needs to decide, nothing more). */
export interface PendingView {
  id: string;
  uid: number;
  account: string | null;
  surface: Surface;
  what: Record<string, unknown>;
  rule: string | null;
  pid?: number;
  cmdline?: string[];
  created: string;
  deadline: string;
  /** Whether `persist` can be chosen (an allow entry exists for it). */
  persist: string | null;
}

export type QueueEvent =
  | { event: 'request'; request: PendingView }
  | {
      event: 'decided';
      id: string;
      action: 'allow' | 'block';
      reason: AskOutcome['reason'];
      how?: Decision;
      by?: Approver;
    };

export interface ApprovalQueueOptions {
  log: DecisionWriter;
  settings: () => ApprovalSettings;
  accountOf?: (uid: number) => string | null;
  /** Writes a persist decision's allow entry (through the consent rules); throws LeashError when it cannot. */
  persist?: (req: PendingView, by: Approver) => Promise<void>;
  /** Whether anyone can answer (default: at least one subscriber). */
  approverReachable?: () => boolean;
  now?: () => number;
}

interface Pending {
  view: PendingView;
  sessionKey: string;
  keepSession: boolean;
  resolve: (o: AskOutcome) => void;
  timer: NodeJS.Timeout;
  deciding: boolean;
  expiredWhileDeciding: boolean;
  onAbort?: () => void;
  signal?: AbortSignal;
}

export interface ApprovalQueue {
  /** The enforcers' side (an Asker). Never rejects. */
  ask(req: AskRequest): Promise<AskOutcome>;
  list(): PendingView[];
  /** Decides a pending request once; throws LeashError approval_not_found / approval_persist_failed. */
  decide(id: string, decision: Decision, by: Approver): Promise<AskOutcome>;
  /** Events (new request, decided); the subscriber counts as a reachable approver while subscribed. */
  subscribe(fn: (ev: QueueEvent) => void): () => void;
  /** Drops a subject's session approvals (its policy changed: the next reconcile). */
  endSessions(uid: number): void;
  /** Answers a subject's pending requests `approval_cancelled` (it left, or is held fail-closed). */
  cancelSubject(uid: number): void;
  stats(): { pending: number; subscribers: number; sessions: number };
  /** What the metrics show (leash_approvals_*): held now by surface, decided and timed out since start. */
  counts(): ApprovalCounts;
  /** Answers every pending request `approval_cancelled` (block) and refuses new ones. */
  close(): void;
}

/** Counters of the queue since the service started, by surface. */
export interface ApprovalCounts {
  pending: Record<Surface, number>;
  /** Answered by a human or by the queue: outcome is the reason (approved_once, approval_denied, approval_timeout…). */
  decided: Record<string, number>;
  timeouts: Record<Surface, number>;
}

const zeroBySurface = (): Record<Surface, number> => ({ network: 0, filesystem: 0, commands: 0, tools: 0 });

/** 10 random bytes in base32: an ID an approver can type, and no one can guess. */
function newId(): string {
  const b = crypto.randomBytes(10);
  const A = 'abcdefghijklmnopqrstuvwxyz234567';
  let bits = 0;
  let v = 0;
  let out = '';
  for (const x of b) {
    v = (v << 8) | x;
    bits += 8;
    while (bits >= 5) {
      out += A[(v >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  return out;
}

const HOW_REASON = { once: 'approved_once', session: 'approved_session', persist: 'approved_persist' } as const;

export function createApprovalQueue(opts: ApprovalQueueOptions): ApprovalQueue {
  const now = opts.now ?? Date.now;
  const pending = new Map<string, Pending>();
  const perSubject = new Map<number, number>();
  const sessions = new Map<string, number>();
  const subscribers = new Set<(ev: QueueEvent) => void>();
  let closed = false;
  const reachable = opts.approverReachable ?? (() => subscribers.size > 0);

  const emit = (ev: QueueEvent) => {
    for (const fn of [...subscribers]) {
      try {
        fn(ev);
      } catch {
        // A subscriber's failure is its own (the socket drops it); the queue goes on.
      }
    }
  };
  const sessionId = (uid: number, surface: Surface, key: string) => `${uid}\0${surface}\0${key}`;

  const decidedCount = new Map<string, number>();
  const timeouts = zeroBySurface();
  function finish(p: Pending, o: AskOutcome): void {
    if (!pending.delete(p.view.id)) return;
    const k = `${p.view.surface}\0${o.reason}`;
    decidedCount.set(k, (decidedCount.get(k) ?? 0) + 1);
    if (o.reason === 'approval_timeout') timeouts[p.view.surface] += 1;
    clearTimeout(p.timer);
    if (p.signal && p.onAbort) p.signal.removeEventListener('abort', p.onAbort);
    const n = (perSubject.get(p.view.uid) ?? 1) - 1;
    if (n <= 0) perSubject.delete(p.view.uid);
    else perSubject.set(p.view.uid, n);
    p.resolve(o);
    emit({
      event: 'decided',
      id: p.view.id,
      action: o.action,
      reason: o.reason,
      ...(o.how ? { how: o.how } : {}),
      ...(o.by ? { by: o.by } : {}),
    });
  }

  const block = (reason: AskOutcome['reason'], request: string | null, extra: Partial<AskOutcome> = {}) =>
    ({ action: 'block', reason, request, ...extra }) as AskOutcome;

  function ask(req: AskRequest): Promise<AskOutcome> {
    try {
      if (closed) return Promise.resolve(block('approval_cancelled', null));
      const sk = sessionId(req.uid, req.surface, req.sessionKey);
      const until = sessions.get(sk);
      if (until !== undefined) {
        if (until > now()) return Promise.resolve({ action: 'allow', reason: 'approved_session', request: null });
        sessions.delete(sk);
      }
      if (req.signal?.aborted) return Promise.resolve(block('approval_cancelled', null));
      if (!reachable()) return Promise.resolve(block('approval_unavailable', null));
      const s = opts.settings();
      if (pending.size >= s.max_pending || (perSubject.get(req.uid) ?? 0) >= s.max_pending_per_subject) {
        return Promise.resolve(block('approval_limit', null));
      }
      const id = newId();
      const created = now();
      const ms = req.deadlineMs ?? Math.max(1, s.deadlines[req.surface]) * 1000;
      const view: PendingView = {
        id,
        uid: req.uid,
        account: opts.accountOf?.(req.uid) ?? null,
        surface: req.surface,
        what: req.what,
        rule: req.rule,
        ...(req.pid !== undefined ? { pid: req.pid } : {}),
        ...(req.cmdline ? { cmdline: req.cmdline } : {}),
        created: new Date(created).toISOString(),
        deadline: new Date(created + ms).toISOString(),
        persist: req.persistEntry,
      };
      return new Promise<AskOutcome>((resolve) => {
        const p: Pending = {
          view,
          sessionKey: req.sessionKey,
          keepSession: req.keepSession === true,
          resolve,
          deciding: false,
          expiredWhileDeciding: false,
          timer: setTimeout(() => {
            if (p.deciding) p.expiredWhileDeciding = true;
            else finish(p, block('approval_timeout', id));
          }, ms),
        };
        p.timer.unref?.();
        pending.set(id, p);
        perSubject.set(req.uid, (perSubject.get(req.uid) ?? 0) + 1);
        if (req.signal) {
          p.signal = req.signal;
          p.onAbort = () => finish(p, block('approval_cancelled', id));
          req.signal.addEventListener('abort', p.onAbort, { once: true });
        }
        opts.log.write({
          uid: req.uid,
          surface: req.surface,
          action: 'ask',
          reason: req.reason ?? 'ask_entry',
          subject: req.what,
          rule: req.rule,
          approval: { request: id, deadline: view.deadline },
        });
        emit({ event: 'request', request: view });
      });
    } catch {
      return Promise.resolve(block('approval_unavailable', null));
    }
  }

  async function decide(id: string, decision: Decision, by: Approver): Promise<AskOutcome> {
    const p = pending.get(id);
    if (!p || p.deciding) {
      throw new LeashError('approval_not_found', `no pending request ${id}: decided already, expired, or unknown`, {
        id,
      });
    }
    if (decision === 'deny') {
      const o = block('approval_denied', id, { how: 'deny', by });
      finish(p, o);
      return o;
    }
    if (decision === 'persist') {
      if (p.view.persist === null || !opts.persist) {
        throw new LeashError('approval_persist_failed', `request ${id} cannot be persisted as an allow entry`, { id });
      }
      p.deciding = true;
      try {
        await opts.persist(p.view, by);
      } catch (e) {
        p.deciding = false;
        if (p.expiredWhileDeciding) finish(p, block('approval_timeout', id));
        const code = e instanceof LeashError ? e.code : 'internal';
        throw new LeashError(
          'approval_persist_failed',
          `request ${id} not persisted (${code}): ${(e as Error).message}`,
          { id, cause: code, ...(e instanceof LeashError && e.details ? { details: e.details } : {}) },
        );
      }
      p.deciding = false;
    }
    if ((decision === 'session' || decision === 'persist') && !p.keepSession) {
      // A persisted entry reaches the enforcers at the next reconcile; until then it passes as a session.
      sessions.set(sessionId(p.view.uid, p.view.surface, p.sessionKey), now() + opts.settings().session_seconds * 1000);
    }
    const o: AskOutcome = { action: 'allow', reason: HOW_REASON[decision], request: id, how: decision, by };
    finish(p, o);
    return o;
  }

  return {
    ask,
    decide,
    list: () => [...pending.values()].map((p) => p.view),
    subscribe(fn) {
      subscribers.add(fn);
      return () => void subscribers.delete(fn);
    },
    endSessions(uid) {
      const prefix = `${uid}\0`;
      for (const k of [...sessions.keys()]) if (k.startsWith(prefix)) sessions.delete(k);
    },
    cancelSubject(uid) {
      for (const p of [...pending.values()]) if (p.view.uid === uid) finish(p, block('approval_cancelled', p.view.id));
    },
    stats: () => ({ pending: pending.size, subscribers: subscribers.size, sessions: sessions.size }),
    counts() {
      const held = zeroBySurface();
      for (const p of pending.values()) held[p.view.surface] += 1;
      return { pending: held, decided: Object.fromEntries(decidedCount), timeouts: { ...timeouts } };
    },
    close() {
      closed = true;
      for (const p of [...pending.values()]) finish(p, block('approval_cancelled', p.view.id));
      sessions.clear();
    },
  };
}
