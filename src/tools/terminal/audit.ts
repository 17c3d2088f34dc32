import fs from 'node:fs';

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

/**
 * An append-only JSONL trail. The file is opened for each record (O_APPEND, 0600) and fsync'd
 * before the write is reported done: a held descriptor would keep writing into a file that was
 * rotated or deleted, and the caller relies on a resolved write meaning the record is on disk.
 */
export function createAuditLog(file: string): AuditLog {
  return {
    async write(rec) {
      const line = JSON.stringify({ ts: new Date().toISOString(), ...rec }) + '\n';
      const fh = await fs.promises.open(file, 'a', 0o600);
      try {
        await fh.write(line);
        await fh.sync();
      } finally {
        await fh.close();
      }
    },
  };
}
