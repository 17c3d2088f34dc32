/**
 * The tools' audit trails, and their one writer (openAuditTrail): JSON lines appended with one
 * write(2) each to a file opened O_APPEND, mode 0600. The gate's (`tools.audit` / `leash mcp
 * --audit FILE`) has one line per tool call with the tool's identity, its operation and resources,
 * the decision and the rule that made it, and a SHA-256 of the result the client received, never
 * the raw arguments or the result; the terminal's (`leash terminal --audit`, TerminalAuditRecord)
 * an attempt and an outcome line per command.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { LeashError } from '../errors.js';
import { jsonLines } from '../formats/lines.js';
import type { Action } from './judge/operations/normalize.js';

export const AUDIT_VERSION = 1;

/** One audit line (this key order). */
export interface AuditRecord {
  v: number;
  ts: string;
  /** The gate process (one per `leash mcp`). */
  run: string;
  /** The MCP session: a new id at each initialize the client sends. */
  session: string | null;
  uid: number;
  /** serverInfo.name and version of the server, from its initialize answer. */
  server: string | null;
  server_version: string | null;
  tool: string;
  mapping: string | null;
  operation: string | null;
  resources: string[];
  hosts: string[];
  methods: string[];
  /** The program of each command (argv[0]), never its arguments. */
  programs: string[];
  ambiguous: boolean;
  decision: 'allow' | 'deny';
  reason: string;
  rule: string | null;
  /** The decision log line of the call. */
  ref: string | null;
  dispatch: 'forwarded' | 'not-forwarded';
  /** ok, error (a JSON-RPC error), tool_error (isError), timeout, closed; null for a denied call. */
  outcome: string | null;
  result_sha256: string | null;
  /** Secrets were masked in what the client received. */
  redacted: boolean;
}

/** One line of the terminal's audit trail. Commands are redacted; output content is never recorded. */
export interface TerminalAuditRecord {
  ts: string;
  event: 'attempt' | 'outcome';
  id: string;
  uid: number;
  tool: 'run_command';
  command: string;
  argv?: string[] | null;
  cwd?: string | null;
  binary?: string | null;
  decision?: 'allow' | 'block';
  reason?: string | null;
  rule?: string | null;
  code?: string;
  exit_code?: number | null;
  duration_ms?: number;
  stdout_bytes?: number;
  stderr_bytes?: number;
  ref?: string | null;
}

/** An audit trail being appended to. */
export interface AuditTrail<R extends object> {
  /**
   * Appends one record. Held: written before this returns, a failed write dropped (a full disk must
   * not stop the session; the decision log still has the call). Durable: resolves once the record
   * is fsync'd, rejects when it could not be made durable.
   */
  write(rec: R): Promise<void>;
  close(): void;
}

/**
 * Opens an audit trail. `held` (the gate's, a record per tool call on the hot path): the file is
 * opened once, now, and an error is LeashError usage. `durable` (the terminal's, whose caller runs a
 * command only once its attempt is on disk): the file is opened for each record, since a held
 * descriptor would keep writing into a file that was rotated or deleted.
 */
export function openAuditTrail<R extends object>(file: string, how: 'held' | 'durable'): AuditTrail<R> {
  if (how === 'durable') {
    return {
      async write(rec) {
        const fh = await fs.promises.open(file, 'a', 0o600);
        try {
          await fh.write(`${JSON.stringify(rec)}\n`);
          await fh.sync();
        } finally {
          await fh.close();
        }
      },
      close() {},
    };
  }
  if (!path.isAbsolute(file)) throw new LeashError('usage', `the audit file must be an absolute path: ${file}`);
  let fd: number;
  try {
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    fd = fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_APPEND | fs.constants.O_CREAT, 0o600);
  } catch (e) {
    throw new LeashError('usage', `cannot open the audit file ${file}: ${(e as NodeJS.ErrnoException).code}`);
  }
  return {
    write(rec) {
      try {
        fs.writeSync(fd, `${JSON.stringify(rec)}\n`);
      } catch {
        /* dropped: see AuditTrail.write */
      }
      return Promise.resolve();
    },
    close() {
      try {
        fs.closeSync(fd);
      } catch {
        /* closed already */
      }
    },
  };
}

export const sha256 = (text: string | Buffer): string => crypto.createHash('sha256').update(text).digest('hex');

/** The action's part of a record. */
export function actionFields(
  a: Action | undefined,
): Pick<AuditRecord, 'mapping' | 'operation' | 'resources' | 'hosts' | 'methods' | 'programs' | 'ambiguous'> {
  if (a === undefined)
    return { mapping: null, operation: null, resources: [], hosts: [], methods: [], programs: [], ambiguous: false };
  return {
    mapping: a.mapping,
    operation: a.operation,
    resources: [...a.paths],
    hosts: [...a.hosts],
    methods: [...a.methods],
    programs: a.commands.map((c) => c[0]!),
    ambiguous: a.ambiguous,
  };
}

/** Reads an audit file: its valid records (a line that is not one is counted, never shown). */
export function readAudit(file: string): { records: AuditRecord[]; bad: number } {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new LeashError('usage', `cannot read the audit file ${file}: ${(e as NodeJS.ErrnoException).code}`);
  }
  const { values, bad: unreadable } = jsonLines(text);
  const records: AuditRecord[] = [];
  let bad = unreadable;
  for (const v of values) {
    const r = v as AuditRecord;
    if (r && r.v === AUDIT_VERSION && typeof r.tool === 'string' && (r.decision === 'allow' || r.decision === 'deny'))
      records.push(r);
    else bad++;
  }
  return { records, bad };
}

export interface AuditSummary {
  records: number;
  bad_lines: number;
  decisions: Record<string, number>;
  operations: Record<string, number>;
  outcomes: Record<string, number>;
  reasons: Record<string, number>;
  tools: Record<string, number>;
  sessions: number;
  runs: number;
  redacted: number;
}

export function summarise(records: AuditRecord[], bad: number): AuditSummary {
  const inc = (o: Record<string, number>, k: string) => (o[k] = (o[k] ?? 0) + 1);
  const s: AuditSummary = {
    records: records.length,
    bad_lines: bad,
    decisions: {},
    operations: {},
    outcomes: {},
    reasons: {},
    tools: {},
    sessions: new Set(records.map((r) => r.session)).size,
    runs: new Set(records.map((r) => r.run)).size,
    redacted: records.filter((r) => r.redacted).length,
  };
  for (const r of records) {
    inc(s.decisions, r.decision);
    inc(s.operations, r.operation ?? '(none)');
    inc(s.outcomes, r.outcome ?? 'not-forwarded');
    inc(s.reasons, r.reason);
    inc(s.tools, r.server ? `${r.server}/${r.tool}` : r.tool);
  }
  return s;
}
