import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { InspectFinding, Surface } from '../engine/types.js';
import { maskInputs } from '../policy-engine.js';

/** What an enforcer hands the log for one decision. */
export interface DecisionRecord {
  uid: number;
  surface: Surface;
  action: 'allow' | 'block';
  reason: string;
  subject: unknown;
  /** The entry that decided, or null for a mode default / failure. */
  rule?: string | null;
  severity?: 'critical';
  /** Tool inspection findings (already masked by the engine). */
  findings?: InspectFinding[];
}

/** One line of the decision log, in this key order. */
export interface DecisionLine extends DecisionRecord {
  ts: string;
  ref: string;
}

export interface DecisionLog {
  /** Writes one line and returns its ref (the short id that ties a block back to its line). */
  write(rec: DecisionRecord): string;
  close(): Promise<void>;
}

const B32 = 'abcdefghijklmnopqrstuvwxyz234567';

/** 8 base32 characters from 40 random bits: short enough to read out, unique enough per log. */
// Random bytes are drawn 4 KiB at a time: one getrandom per line cost more than the rest of a decision.
let pool = Buffer.alloc(0);
let poolAt = 0;

export function newRef(): string {
  if (poolAt + 5 > pool.length) {
    pool = crypto.randomBytes(4096);
    poolAt = 0;
  }
  // 40 random bits -> 8 base32 characters.
  let hi = pool[poolAt]!;
  let lo = ((pool[poolAt + 1]! << 24) | (pool[poolAt + 2]! << 16) | (pool[poolAt + 3]! << 8) | pool[poolAt + 4]!) >>> 0;
  poolAt += 5;
  let s = '';
  for (let i = 0; i < 8; i++) {
    s = B32[lo & 31]! + s;
    lo = ((lo >>> 5) | ((hi & 31) << 27)) >>> 0;
    hi >>>= 5;
  }
  return s;
}

/** Masks secrets and PII in a tool subject's inputs; other subjects are written as they are. */
function safeSubject(surface: Surface, subject: unknown): unknown {
  if (surface !== 'tools' || subject === null || typeof subject !== 'object') return subject;
  const s = subject as { name?: unknown; inputs?: unknown };
  return 'inputs' in s ? { ...s, inputs: maskInputs(s.inputs) } : s;
}

/** Formats one decision as its JSON line (with the newline). */
export function formatDecision(rec: DecisionRecord, ref = newRef(), now = new Date()): string {
  const line: DecisionLine = {
    ts: now.toISOString(),
    ref,
    uid: rec.uid,
    surface: rec.surface,
    action: rec.action,
    reason: rec.reason,
    subject: safeSubject(rec.surface, rec.subject),
  };
  if (rec.rule !== undefined) line.rule = rec.rule;
  if (rec.severity !== undefined) line.severity = rec.severity;
  if (rec.findings !== undefined) line.findings = rec.findings;
  return `${JSON.stringify(line)}\n`;
}

/**
 * Opens the decision sink: `stdout` (the journal) or an absolute file path.
 *
 * Each line is one synchronous write(2) to a descriptor opened O_APPEND, not a buffered stream:
 * a decision the enforcer has acted on is in the kernel before `write` returns, so a crash of the
 * service loses no line, and concurrent writers (service, watcher) never interleave within a line.
 * The file is 0600 (decisions name what an agent tried to reach) in a 0750 directory.
 * stdout is synchronous for files and pipes on Linux, so it gives the same guarantee.
 */
export function createDecisionLog(opts: { sink: string }): DecisionLog {
  if (opts.sink === 'stdout') {
    return {
      write(rec) {
        const ref = newRef();
        process.stdout.write(formatDecision(rec, ref));
        return ref;
      },
      close: async () => {},
    };
  }
  if (!path.isAbsolute(opts.sink)) throw new Error(`decision sink must be stdout or an absolute path: ${opts.sink}`);
  // Stated, not left to the umask (the unit runs with UMask=0077): 0750 whatever the process umask is.
  if (fs.mkdirSync(path.dirname(opts.sink), { recursive: true, mode: 0o750 }) !== undefined) {
    fs.chmodSync(path.dirname(opts.sink), 0o750);
  }
  const fd = fs.openSync(opts.sink, fs.constants.O_WRONLY | fs.constants.O_APPEND | fs.constants.O_CREAT, 0o600);
  // An existing file keeps the mode it was created with; re-state 0600 when it is ours to change.
  if (fs.fstatSync(fd).uid === process.getuid?.()) fs.fchmodSync(fd, 0o600);
  let open = true;
  return {
    write(rec) {
      if (!open) throw new Error('decision log is closed');
      const ref = newRef();
      const buf = Buffer.from(formatDecision(rec, ref), 'utf8');
      let off = 0;
      while (off < buf.length) off += fs.writeSync(fd, buf, off, buf.length - off);
      return ref;
    },
    async close() {
      if (!open) return;
      open = false;
      fs.fsyncSync(fd);
      fs.closeSync(fd);
    },
  };
}
