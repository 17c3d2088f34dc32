/**
 * The reload generation: what lets `leash reload` and every policy-writing command return only once their change is
 * in force. The service counts each SIGHUP as it arrives and writes the count to a small status file at once (in the
 * signal's own tick, before any pass can start); when a reload finishes it records the highest count that reload
 * covers and what it could not apply. A caller reads the count, signals, and waits for `done` to pass it: the pass
 * that covers its signal started after its signal, so after its write.
 */
import fs from 'node:fs';
import path from 'node:path';

/** Something a reload could not put in force (a config refused, a subject denied, a pass that failed wholesale). */
export interface ReloadProblem {
  code: string;
  message: string;
  account?: string;
}

export interface ReloadStatus {
  pid: number;
  /** SIGHUPs received since the process started. */
  hup: number;
  /** The highest SIGHUP count whose reload has finished. */
  done: number;
  /** 'starting' until the first pass is in force, then 'ready'; 'stopping' once a stop began. */
  phase: 'starting' | 'ready' | 'stopping';
  /** What the reload that set `done` could not apply (empty: everything is in force). */
  problems: ReloadProblem[];
  /** UIDs in force after that reload, by surface (filesystem: acknowledged by the watcher). */
  confined?: Record<string, number[]>;
  at: string;
}

/** Where the status file lives: LEASH_STATUS_FILE, else beside the pid file (LEASH_PID_FILE or /run/leash). */
export function statusFilePath(env: NodeJS.ProcessEnv = process.env): string {
  if (env.LEASH_STATUS_FILE) return env.LEASH_STATUS_FILE;
  return path.join(path.dirname(env.LEASH_PID_FILE ?? '/run/leash/leash.pid'), 'reconcile.json');
}

export function readReloadStatus(file: string): ReloadStatus | null {
  try {
    const s = JSON.parse(fs.readFileSync(file, 'utf8')) as ReloadStatus;
    return typeof s.pid === 'number' && typeof s.hup === 'number' && typeof s.done === 'number' ? s : null;
  } catch {
    return null;
  }
}

export interface ReloadTracker {
  readonly hups: number;
  /** Counts one SIGHUP and writes the count (synchronously: before any pass that could cover it starts). */
  received(): number;
  /** A reload covering SIGHUPs up to `covers` finished with these problems. */
  finished(covers: number, problems: ReloadProblem[], confined?: Record<string, number[]>): void;
  phase(p: ReloadStatus['phase']): void;
  /** Removes the file (a stop): a stale count must not confirm anything for the next process. */
  remove(): void;
}

export function createReloadTracker(file: string | null, onWriteError?: (e: Error) => void): ReloadTracker {
  const st: ReloadStatus = {
    pid: process.pid,
    hup: 0,
    done: 0,
    phase: 'starting',
    problems: [],
    at: new Date().toISOString(),
  };
  const write = () => {
    if (file === null) return;
    st.at = new Date().toISOString();
    const tmp = `${file}.${process.pid}.tmp`;
    try {
      fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o755 });
      fs.writeFileSync(tmp, `${JSON.stringify(st)}\n`, { mode: 0o644 });
      // Readable by `leash status` as any user: the unit's UMask=0077 would make it root's alone.
      fs.chmodSync(tmp, 0o644);
      fs.renameSync(tmp, file);
    } catch (e) {
      onWriteError?.(e as Error);
    }
  };
  write();
  return {
    get hups() {
      return st.hup;
    },
    received() {
      st.hup++;
      write();
      return st.hup;
    },
    finished(covers, problems, confined) {
      if (covers < st.done) return;
      st.done = covers;
      st.problems = problems;
      if (confined) st.confined = confined;
      write();
    },
    phase(p) {
      st.phase = p;
      write();
    },
    remove() {
      if (file === null) return;
      try {
        const cur = readReloadStatus(file);
        if (cur?.pid === process.pid) fs.rmSync(file, { force: true });
      } catch {
        // nothing to remove
      }
    },
  };
}
