/**
 * A judge answers the gate's three policy questions (judge a request, which tools to hide, record a
 * refused message). The local judge works from a compiled policy and writes the decision log; the
 * remote judge (socket.ts) asks the running service, which does both under the caller's UID.
 */
import { formatDecisionTail, type DecisionWriter } from '../../log/decisions.js';
import type { JsonValue } from '../../formats/json.js';
import { randomUUID } from 'node:crypto';
import { actionFields, type AuditRecord, type AuditTrail } from '../audit.js';
import { createValidatedWalker } from './operations/paths.js';
import { filterListing } from './operations/listing.js';
import { workspaceWarnings, type ServerModel } from './operations/model.js';
import {
  askUnavailable,
  DENIED_CODE,
  deniedByName,
  judgeRequest,
  type AskJudgment,
  type GateSession,
  type Judgment,
} from './decide.js';
import { readAllowed, tableFor } from './operations/rules.js';
import type { MappingTable } from './operations/mappings.js';
import { redactForLog } from './redact.js';
import { type CompiledGatePolicy } from './compile.js';
import { CHUNK_LINES, createNativeCallJudge } from './native.js';

/**
 * A judgment as the gate uses it: the log line's ref travels in the error's data; `audit` is what
 * the gate hands back to `answered` when the server's answer to an allowed call arrives.
 */
export type GateJudgment = Judgment & {
  ref?: string;
  audit?: PendingAudit;
  held?: HeldCall;
  /** An allowed listing call: takes the entries the rules protect out of its result (operations/listing.ts). */
  filter?: (result: JsonValue) => boolean | Promise<boolean>;
};

/**
 * An asked call the service holds for a human (a judgment with action `ask`): `outcome` is the final
 * judgment, an allow (the gate relays the call then) or a deny with the approval's reason; `cancel`
 * tells the service the call is gone (the client cancelled it, the gate is ending).
 */
export interface HeldCall {
  outcome: Promise<GateJudgment>;
  cancel(): void;
}

/** An allowed call's audit record, waiting for its outcome. */
export type PendingAudit = Omit<AuditRecord, 'outcome' | 'result_sha256' | 'redacted'>;

/** How an allowed call ended, for its audit record. */
export interface CallOutcome {
  outcome: 'ok' | 'error' | 'tool_error' | 'timeout' | 'closed';
  /** SHA-256 of the result (or error) member as the client received it. */
  sha256: string | null;
  redacted: boolean;
}

export interface GateJudge {
  /** Strip tools denied by name from tools/list. */
  readonly hideDenied: boolean;
  judge(method: string, params: JsonValue | undefined, notification: boolean): GateJudgment | Promise<GateJudgment>;
  hidden(names: string[]): boolean[] | Promise<boolean[]>;
  /** A message the gate would not relay (or a request that failed on the server side). */
  event(ev: GateEvent): void;
  /** Called before the gate writes what it queued: held-back log lines go out first. */
  flush?(): void;
  close?(): void;
  /** The gate's model of its server, kept up to date by the gate as messages pass. */
  attachModel?(m: ServerModel): void;
  /** What the gate says once the server named itself: a workspace the rules cannot mean (operations/model.ts). */
  warnings?(): string[];
  /** The server's initialize answer named it (selects the operations mapping table). */
  serverInfo?(name: string, version: string | null): void;
  /** Mask secrets in the server's answers (tools.redact_output). */
  readonly redactOutput?: boolean;
  /** Audit records wait for outcomes (the gate then reads every tools/call answer). */
  readonly auditing?: boolean;
  /** The outcome of an allowed call whose judgment carried `audit`. */
  answered?(audit: PendingAudit, outcome: CallOutcome): void;
  /**
   * A tools/list page from the server: each named tool and the SHA-256 of its definition as sent. A
   * judge that holds asked calls binds session approvals to it (the gate then reads every tools/list).
   */
  listed?(tools: [string, string][]): void;
  /**
   * The native judge of plain tools/calls (./native.ts), when this judge has one: `judge` the params span of a
   * scanned line (an answer's index when certainly allowed, else -1), `allowed` writes that call's decision line.
   */
  readonly native?: {
    judge(line: Buffer, start: number, end: number): number;
    allowed(idx: number, line: Buffer): void;
    /** The plain calls at the start of a client chunk it certainly allows (NativeCallJudge.requests), into `lines`. */
    requests(chunk: Buffer, at: number): number;
    readonly lines: Float64Array;
    /** `allowed` for a call `requests` answered, whose path is at chunk[start, end). */
    allowedAt(idx: number, chunk: Buffer, start: number, end: number): void;
  };
}

export interface GateEvent {
  reason: 'protocol_client' | 'protocol_server' | 'server_timeout' | 'server_closed' | 'server_stalled';
  /** Which side sent the refused message. */
  rejected?: 'client' | 'server';
  /** Parser or envelope code, e.g. duplicate_key, other_spelling. */
  code?: string;
  method?: string;
  /** The offending line (cut to 200 characters before it is logged). */
  line?: string;
}

const cut = (s: string) => (s.length > 200 ? `${s.slice(0, 200)}…` : s);

export interface LogContext {
  log: DecisionWriter;
  uid: number;
  logArgs: 'denied' | 'all' | 'none';
  mask: (s: string) => string;
  /**
   * Lines of allowed calls that carry no inputs, by method, name, reason and rule: the same call
   * allowed again writes the same line but for its time and ref, so the rest is formatted once.
   */
  allowTails?: Map<string, AllowTail>;
}

/** A formatted allow line's tail and what it was formatted for. */
interface AllowTail {
  named: boolean;
  method: string;
  reason: string;
  rule: string | null;
  operation: string | undefined;
  /** The resolved resources the line names (resourceKey). */
  resources: string;
  tail: string;
}

/** What a decision line names of an action: resolved paths, hosts, programs (never argument values). */
function resourceKey(j: Judgment): string {
  const a = j.op?.action;
  if (a === undefined) return '';
  if (a.hosts.length === 0 && a.commands.length === 0) return a.paths.length === 1 ? a.paths[0]! : a.paths.join('\0');
  return `${a.paths.join('\0')}\n${a.hosts.join('\0')}\n${a.commands.map((c) => c[0]).join('\0')}`;
}

/** Lists cut to 16 entries of 200 characters, masked: what the line says it judged. */
function judged(j: Judgment, subject: Record<string, unknown>, mask: (s: string) => string): void {
  const a = j.op?.action;
  if (a === undefined) return;
  const list = (xs: string[]) => xs.slice(0, 16).map((x) => cut(mask(x)));
  if (a.paths.length) subject.resources = list(a.paths);
  if (a.hosts.length) subject.hosts = list(a.hosts);
  if (a.commands.length) subject.programs = list(a.commands.map((c) => c[0]!));
}

/** Bound on LogContext.allowTails (a client inventing names must not grow it for ever). */
const MAX_ALLOW_TAILS = 4096;

/** Builds the log record of a judgment and writes it; returns the ref (undefined when not logged). */
export function logJudgment(j: Judgment, params: JsonValue | undefined, ctx: LogContext): string | undefined {
  if (j.action === 'allow' && !j.policed) return undefined;
  // An asked call's lines are the queue's `ask` line and its outcome's (./hold.ts), not this one.
  if (j.action === 'ask') return undefined;
  const shadowed = j.action === 'allow' ? j.wouldBlock : undefined;
  const withArgs =
    ctx.logArgs === 'all' || (ctx.logArgs === 'denied' && (j.action === 'deny' || shadowed !== undefined));
  const tails = ctx.allowTails;
  let tailKey: string | undefined;
  let hit: AllowTail | undefined;
  if (
    tails !== undefined &&
    ctx.log.writeTail !== undefined &&
    j.action === 'allow' &&
    shadowed === undefined &&
    !withArgs &&
    j.verdict !== undefined &&
    j.verdict.at === undefined &&
    !j.verdict.findings?.length
  ) {
    // Keyed by name; the rest is compared (a hash of one short string per call).
    tailKey = j.name ?? '';
    hit = tails.get(tailKey);
    if (
      hit !== undefined &&
      hit.resources === resourceKey(j) &&
      hit.method === j.method &&
      hit.reason === j.verdict.reason &&
      hit.rule === j.verdict.rule &&
      hit.operation === j.op?.action.operation &&
      hit.named === (j.name !== undefined)
    )
      return ctx.log.writeTail('allow', hit.tail);
  }
  const args =
    withArgs && params && typeof params === 'object' && !Array.isArray(params)
      ? (params as Record<string, JsonValue>).arguments
      : undefined;
  const subject: Record<string, unknown> = { method: j.method };
  // A name that matched an allow entry is the operator's own text: nothing to mask, and masking
  // runs every detector. Any other name (denied, or passed by blacklist mode) is masked.
  if (j.name !== undefined) subject.name = cut(j.verdict?.reason === 'allow_entry' ? j.name : ctx.mask(j.name));
  if (args !== undefined) subject.inputs = redactForLog(args, ctx.mask);
  if (j.op !== undefined) subject.operation = j.op.action.operation;
  judged(j, subject, ctx.mask);
  if (j.verdict?.at) subject.at = cut(j.verdict.at);
  if (j.verdict?.findings?.length) subject.findings = j.verdict.findings;
  if (j.action === 'deny' && j.code !== -32001) subject.code = j.code;
  const rec = {
    uid: ctx.uid,
    surface: 'tools' as const,
    action: shadowed ? ('would_block' as const) : j.action === 'allow' ? ('allow' as const) : ('block' as const),
    reason: shadowed ? shadowed.reason : j.action === 'allow' ? (j.verdict?.reason ?? 'allow_entry') : j.reason,
    subject,
    rule: shadowed ? shadowed.rule : j.action === 'allow' ? (j.verdict?.rule ?? null) : j.rule,
  };
  if (tailKey !== undefined) {
    const tail = formatDecisionTail(rec);
    if (tails!.size >= MAX_ALLOW_TAILS) tails!.clear();
    tails!.set(tailKey, {
      named: j.name !== undefined,
      method: j.method,
      reason: rec.reason,
      rule: rec.rule,
      operation: j.op?.action.operation,
      resources: resourceKey(j),
      tail,
    });
    return ctx.log.writeTail!('allow', tail);
  }
  return ctx.log.write(rec);
}

/** Writes a gate event (refused message, timeout, server failure) to the decision log. */
export function logEvent(ev: GateEvent, ctx: LogContext): string {
  const subject: Record<string, unknown> = {};
  if (ev.rejected) subject.rejected = ev.rejected;
  if (ev.code) subject.code = ev.code;
  if (ev.method) subject.method = cut(ev.method);
  if (ev.line !== undefined && ctx.logArgs !== 'none') subject.line = cut(ctx.mask(ev.line));
  return ctx.log.write({ uid: ctx.uid, surface: 'tools', action: 'block', reason: ev.reason, subject, rule: null });
}

export interface LocalJudgeOptions {
  policy: CompiledGatePolicy;
  log: DecisionWriter;
  /** The subject's UID written in every record (the gate's own UID when run with --policy). */
  uid: number;
  /** Secret masking (the engine's maskSecrets); identity when absent. */
  mask?: (s: string) => string;
  /** Where audit records go (the policy's tools.audit, or --audit), if anywhere. */
  audit?: AuditTrail<AuditRecord> | null;
  /**
   * Who decides an asked call when there is no service (`leash mcp --approval tty`): the outcome is the
   * call's judgment. Absent: an asked call is refused at once (approval_unavailable).
   */
  approve?: (j: AskJudgment, params: JsonValue | undefined) => Promise<{ action: 'allow' | 'block'; reason: string }>;
}

/** An asked call as its approver decided it: approved_* allows it, anything else denies it with that reason. */
function decidedAsk(j: AskJudgment, o: { action: 'allow' | 'block'; reason: string }): Exclude<Judgment, AskJudgment> {
  const verdict = { ...(j.verdict ?? { action: 'ask' as const }), reason: o.reason, rule: j.rule };
  if (o.action === 'allow')
    return {
      action: 'allow',
      policed: true,
      method: j.method,
      name: j.name,
      verdict: { ...verdict, action: 'allow' },
      op: j.op,
    };
  return {
    action: 'deny',
    code: DENIED_CODE,
    message: `denied by leash: ${o.reason}${j.op ? ` (${j.op.action.operation})` : ''}`,
    reason: o.reason,
    rule: j.rule,
    method: j.method,
    name: j.name,
    verdict: { ...verdict, action: 'block' },
    op: j.op,
  };
}

/** A judge over a compiled policy, logging every policed or denied call. */
export function createLocalJudge(o: LocalJudgeOptions): GateJudge {
  const ctx: LogContext = {
    log: o.log,
    uid: o.uid,
    logArgs: o.policy.logArgs,
    mask: o.mask ?? ((s: string) => s),
    allowTails: new Map(),
  };
  const session: GateSession & { id: string | null; version: string | null } = {
    // Only rules over operations read paths: no inotify instance for a gate by names.
    walker: o.policy.ops !== null ? createValidatedWalker() : null,
    serverName: null,
    version: null,
    id: null,
  };
  const run = randomUUID();
  const audit = o.audit ?? null;
  // Audited calls and a log without tails are JavaScript's (the native judge writes no audit record).
  const nativeOk = audit === null && o.log.writeTail !== undefined && o.policy.logArgs !== 'all';
  // Under `mapping: auto` the table is the one the server's initialize answer names: a native judge per table,
  // made when it is known (serverInfo below), none before.
  const auto = o.policy.ops?.mapping === 'auto';
  // Where every native judge of this gate writes what `requests` read (over an ArrayBuffer the collector never moves).
  const lines = new Float64Array(new ArrayBuffer(8 * 5 * CHUNK_LINES));
  let native = nativeOk && !auto ? createNativeCallJudge(o.policy, session.walker, undefined, lines) : null;
  let nativeTable: MappingTable | null = null;
  const nativeTail = (idx: number, line: Buffer) => void ctx.log.writeTail!('allow', native!.tail(idx, line));
  const nativeTailAt = (idx: number, chunk: Buffer, start: number, end: number) =>
    void ctx.log.writeTail!('allow', native!.tail(idx, chunk, start, end));
  // The decision line and the audit record of a final judgment.
  const finish = (j: Exclude<Judgment, AskJudgment> & GateJudgment, params: JsonValue | undefined): GateJudgment => {
    const ref = logJudgment(j, params, ctx);
    if (ref !== undefined) j.ref = ref;
    const act = j.op?.action;
    if (j.action === 'allow' && act?.listing !== undefined && o.policy.ops !== null) {
      const ok = readAllowed(o.policy.ops);
      j.filter = (result) => filterListing(result, act, ok);
    }
    if (audit !== null && j.name !== undefined && j.method.toLowerCase() === 'tools/call') {
      const rec: PendingAudit = {
        v: 1,
        ts: new Date().toISOString(),
        run,
        session: session.id,
        uid: o.uid,
        server: session.serverName,
        server_version: session.version,
        tool: ctx.mask(j.name),
        ...actionFields(j.op?.action),
        decision: j.action,
        reason: j.action === 'allow' ? (j.verdict?.reason ?? 'allow_entry') : j.reason,
        rule: j.action === 'allow' ? (j.verdict?.rule ?? null) : j.rule,
        ref: ref ?? null,
        dispatch: j.action === 'allow' ? 'forwarded' : 'not-forwarded',
      };
      if (j.action === 'deny') void audit.write({ ...rec, outcome: null, result_sha256: null, redacted: false });
      else j.audit = rec;
    }
    return j;
  };
  return {
    hideDenied: o.policy.hideDenied,
    redactOutput: o.policy.redactOutput,
    auditing: audit !== null,
    judge(method, params) {
      if (method === 'initialize') session.id = randomUUID();
      const asked = judgeRequest(method, params, o.policy, session);
      if (asked.action === 'ask' && o.approve)
        return o.approve(asked, params).then(
          (out) => finish(decidedAsk(asked, out), params),
          () => finish(askUnavailable(asked), params),
        );
      // No service, so no approver: an asked call is refused at once, as the queue refuses it with nobody subscribed.
      const j = finish(asked.action === 'ask' ? askUnavailable(asked) : asked, params);
      if (native !== null && method === 'tools/call' && j.action === 'allow' && j.name !== undefined)
        native.learn(j.name, j, ctx.allowTails!.get(j.name)?.tail);
      return j;
    },
    native:
      nativeOk && auto
        ? {
            judge: (line, start, end) => (native === null ? -1 : native.judge(line, start, end)),
            allowed: nativeTail,
            requests: (chunk, at) => (native === null ? 0 : native.requests(chunk, at)),
            lines,
            allowedAt: nativeTailAt,
          }
        : native === null
          ? undefined
          : { judge: native.judge, allowed: nativeTail, requests: native.requests, lines, allowedAt: nativeTailAt },
    attachModel(m) {
      session.model = m;
    },
    warnings() {
      const ops = o.policy.ops;
      if (ops === null) return [];
      return workspaceWarnings(ops.workspace, tableFor(ops, session), session.model?.snapshot().lists ?? null);
    },
    serverInfo(name, version) {
      session.serverName = name;
      session.version = version;
      const table = auto && nativeOk ? tableFor(o.policy.ops!, session) : null;
      if (table !== nativeTable) {
        // Another table reads calls from now on: what the last one's judge learnt does not hold.
        nativeTable = table;
        native = table === null ? null : createNativeCallJudge(o.policy, session.walker, table, lines);
      }
    },
    answered(rec, out) {
      void audit?.write({ ...rec, outcome: out.outcome, result_sha256: out.sha256, redacted: out.redacted });
    },
    hidden(names) {
      return names.map((n) => deniedByName(n, o.policy));
    },
    event(ev) {
      logEvent(ev, ctx);
    },
    flush() {
      o.log.flush?.();
    },
    close() {
      o.log.flush?.();
      audit?.close();
      session.walker?.close();
    },
  };
}
