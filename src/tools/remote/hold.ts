/**
 * Asked tool calls in the service, one `ToolHolds` per gate connection on the tools socket: a call the
 * subject's policy asks about is put to the approvals queue (the subject is the connection's UID, from
 * SO_PEERCRED) while the gate's other calls flow; the outcome goes back to the gate as the final
 * judgment. `session` approvals live here, not in the queue: they last as long as the connection (the
 * gate's life) and are bound to the tool's schema hash from the server's tools/list, so a changed
 * definition drops them and the next call asks again.
 */
import { approvalOf, type Approver, type Asker, type AskOutcome } from '../../engine/approval.js';
import type { DecisionWriter } from '../../log/decisions.js';
import type { JsonValue } from '../../formats/json.js';
import type { GateJudgment } from '../judge/judge.js';
import { normalizeToolName } from '../judge/names.js';
import { DENIED_CODE, type AskJudgment } from '../judge/decide.js';
import { redactForLog } from '../judge/redact.js';

/** A session approval: the schema hash it is bound to, and who granted it in which request. */
interface Session {
  hash: string | null;
  request: string | null;
  by?: Approver;
}

export interface ToolHoldsOptions {
  /** The approvals queue; absent: every ask is refused at once (approval_unavailable). */
  ask?: Asker;
  log: DecisionWriter;
  uid: number;
  mask: (s: string) => string;
  /** A session approval was dropped because the server changed the tool's definition. */
  onSessionDropped?: (e: { uid: number; tool: string; request: string | null }) => void;
}

/** What `start` gives the connection: a final judgment now, or a hold whose outcome is sent later. */
export type HoldStart = { now: GateJudgment } | { hold: number };

const cut = (s: string) => (s.length > 200 ? `${s.slice(0, 200)}…` : s);

export class ToolHolds {
  private readonly sessions = new Map<string, Session>();
  private readonly schemas = new Map<string, string>();
  private readonly held = new Map<number, AbortController>();
  private next = 0;
  private closed = false;

  constructor(private readonly o: ToolHoldsOptions) {}

  /** Pending holds (tests, status). */
  get size(): number {
    return this.held.size;
  }

  /**
   * An asked call: passes at once under a session approval whose schema is unchanged; otherwise it is
   * queued and `send(hold, final)` is called once with the outcome (never before this returns).
   */
  start(j: AskJudgment, params: JsonValue | undefined, send: (hold: number, final: GateJudgment) => void): HoldStart {
    const name = normalizeToolName(j.name);
    const s = this.sessions.get(name);
    if (s !== undefined && s.hash === (this.schemas.get(name) ?? null)) {
      const o: AskOutcome = {
        action: 'allow',
        reason: 'approved_session',
        request: s.request,
        how: 'session',
        ...(s.by ? { by: s.by } : {}),
      };
      return { now: this.final(j, o) };
    }
    if (!this.o.ask || this.closed)
      return { now: this.final(j, { action: 'block', reason: 'approval_unavailable', request: null }) };
    const id = ++this.next;
    const ac = new AbortController();
    this.held.set(id, ac);
    const args =
      params !== null && typeof params === 'object' && !Array.isArray(params)
        ? (params as Record<string, JsonValue>).arguments
        : undefined;
    const asked = this.o
      .ask({
        uid: this.o.uid,
        surface: 'tools',
        what: { name: cut(this.o.mask(j.name)), arguments: redactForLog(args, this.o.mask) ?? null },
        rule: j.rule,
        reason: j.reason,
        sessionKey: name,
        persistEntry: j.persist,
        keepSession: true,
        signal: ac.signal,
      })
      .catch((): AskOutcome => ({ action: 'block', reason: 'approval_unavailable', request: null }));
    void asked.then((o) => {
      this.held.delete(id);
      if (o.action === 'allow' && (o.how === 'session' || o.how === 'persist')) {
        // persist: the allow entry decides from the next reconcile on; until then it passes as a session.
        this.sessions.set(name, {
          hash: this.schemas.get(name) ?? null,
          request: o.request,
          ...(o.by ? { by: o.by } : {}),
        });
      }
      send(id, this.final(j, o));
    });
    return { hold: id };
  }

  /** The gate gave up on a held call (the client cancelled it, or the gate is ending). */
  cancel(hold: number): void {
    this.held.get(hold)?.abort();
  }

  /**
   * A tools/list page the server sent: each tool's schema hash. A session approval whose tool now has
   * another definition is dropped (the next call asks again).
   */
  listed(tools: [string, string][]): void {
    for (const [raw, hash] of tools) {
      const name = normalizeToolName(raw);
      this.schemas.set(name, hash);
      const s = this.sessions.get(name);
      if (s !== undefined && s.hash !== hash) {
        this.sessions.delete(name);
        this.o.onSessionDropped?.({ uid: this.o.uid, tool: cut(this.o.mask(raw)), request: s.request });
      }
    }
    // A server inventing names must not grow the table for ever.
    while (this.schemas.size > 10_000) this.schemas.delete(this.schemas.keys().next().value!);
  }

  /** The connection closed (the gate exited): every held call is cancelled, every session ends. */
  close(): void {
    this.closed = true;
    for (const ac of this.held.values()) ac.abort();
    this.sessions.clear();
  }

  /** The outcome's decision line (the enforcer's own, after the queue's `ask` line) and the gate's answer. */
  private final(j: AskJudgment, o: AskOutcome): GateJudgment {
    const subject: Record<string, unknown> = { method: j.method, name: cut(this.o.mask(j.name)) };
    if (j.op !== undefined) subject.operation = j.op.action.operation;
    const ref = this.o.log.write({
      uid: this.o.uid,
      surface: 'tools',
      action: o.action,
      reason: o.reason,
      subject,
      rule: j.rule,
      approval: approvalOf(o),
    });
    if (o.action === 'allow') return { action: 'allow', policed: true, method: j.method, name: j.name, ref };
    return {
      action: 'deny',
      code: DENIED_CODE,
      message: `denied by leash: ${o.reason}`,
      reason: o.reason,
      rule: j.rule,
      method: j.method,
      name: j.name,
      ref,
    };
  }
}
