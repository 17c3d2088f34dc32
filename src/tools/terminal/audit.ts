/**
 * The terminal's audit records, written through the tools' one audit writer (../audit.ts) in its
 * durable form: a command runs only once its attempt record is on disk.
 */
import { openAuditTrail } from '../audit.js';

/** One line of the terminal's audit trail. Commands are redacted; output content is never recorded. */
export interface AuditRecord {
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

export interface AuditLog {
  /** Appends one record and fsyncs it; rejects when it could not be made durable. */
  write(rec: AuditRecord): Promise<void>;
}

/** The terminal's trail: each record stamped with its time, first. */
export function createAuditLog(file: string): AuditLog {
  const trail = openAuditTrail<{ ts: string } & AuditRecord>(file, 'durable');
  return { write: (rec) => trail.write({ ts: new Date().toISOString(), ...rec }) };
}
