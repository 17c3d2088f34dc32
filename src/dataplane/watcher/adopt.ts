// The watcher outlives the service (docs/operations.md, "What stays enforced at each transition"). A watcher whose
// service ended without releasing it (a crash, a restart, an upgrade) keeps judging with its last map and listens
// on its adoption socket in the runtime directory (watcher-main.ts). The next start connects there, checks that
// what answers is a watcher of ours, and hands it the current map: the fanotify group never closed, so no event
// went unjudged. A deliberate stop releases it (the service itself, or `leash teardown` after a stop that left it).
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { WatcherStatus } from './protocol.js';
import { request, wireChannel, type Channels, type Child, type Proc, type SpawnSpec } from './watcher-proc.js';

/** The adoption socket's name in the runtime directory (/run/leash under systemd). */
export const ADOPT_SOCKET_NAME = 'watcher.sock';

/**
 * Only a socket this user made, in a directory nobody else may write, is taken for a watcher: anyone who could put
 * one there could pose as the watcher and answer the adoption with a map of its own.
 */
function trusted(sockPath: string): boolean {
  const me = process.geteuid?.() ?? 0;
  const s = fs.lstatSync(sockPath, { throwIfNoEntry: false });
  const d = fs.statSync(path.dirname(sockPath), { throwIfNoEntry: false });
  return !!s && s.isSocket() && s.uid === me && !!d && d.uid === me && (d.mode & 0o022) === 0;
}

/** The adopted watcher is not our child: its channel's end is its exit, signals go to its PID. */
class AdoptedChild extends EventEmitter implements Child {
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  constructor(private readonly pid: number) {
    super();
  }
  kill(signal: NodeJS.Signals = 'SIGTERM'): boolean {
    try {
      process.kill(this.pid, signal);
      return true;
    } catch {
      return false;
    }
  }
  ended(): void {
    if (this.exitCode !== null) return;
    this.exitCode = 0;
    this.emit('exit');
  }
}

function connect(sockPath: string, timeoutMs: number): Promise<net.Socket | null> {
  return new Promise((resolve) => {
    const s = net.createConnection(sockPath);
    const t = setTimeout(() => {
      s.destroy();
      resolve(null);
    }, timeoutMs);
    s.once('connect', () => {
      clearTimeout(t);
      resolve(s);
    });
    s.once('error', (e: NodeJS.ErrnoException) => {
      clearTimeout(t);
      // Nobody listens: the orphan that made it is gone.
      if (e.code === 'ECONNREFUSED') fs.rmSync(sockPath, { force: true });
      resolve(null);
    });
  });
}

/** A watcher script's build identity: an upgrade replaces the file (a new inode), a restart does not. */
export function buildOf(script: string): string {
  try {
    const st = fs.statSync(script);
    return `${st.ino}:${Math.round(st.mtimeMs)}`;
  } catch {
    return '';
  }
}

/** The real user ID of `pid` (/proc/PID/status), or null. */
function uidOf(pid: number): number | null {
  try {
    const m = /^Uid:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

/**
 * Adopts the orphaned watcher waiting on `sockPath`: sends it the current map and resolves with it as the active
 * watcher once it has acknowledged that map. Null when there is none (no socket, nobody listening), or what
 * answers is not a watcher of ours; `refused` is then the connection to a watcher of ours that refused the map or
 * runs another build (an upgrade: the new version's watcher must run): the caller releases it on that connection
 * once a new watcher of its own has its marks on, so both groups judge in between and no moment has none.
 */
export async function adoptWatcher(
  ch: Channels,
  spec: SpawnSpec,
  sockPath: string,
  onExit: (p: Proc) => void,
): Promise<{ proc: Proc | null; refused: net.Socket | null }> {
  if (!trusted(sockPath)) return { proc: null, refused: null };
  const sock = await connect(sockPath, 2000);
  if (!sock) return { proc: null, refused: null };
  const proc: Proc = {
    c: new AdoptedChild(0),
    chan: sock,
    pending: new Map(),
    pid: null,
    status: null,
    ready: Promise.resolve(null as unknown as WatcherStatus),
    role: 'active',
  };
  wireChannel(proc, spec);
  const timeoutMs = spec.readyTimeoutMs ?? 10_000;
  let timer: NodeJS.Timeout | undefined;
  const reply = await Promise.race([
    request(ch, proc, { op: 'adopt', subjects: [...ch.map.values()], watch: spec.watch ?? [] }).catch(() => null),
    new Promise<null>((r) => (timer = setTimeout(() => r(null), timeoutMs))),
  ]);
  clearTimeout(timer);
  const st = reply?.ok ? reply.status : undefined;
  // Our watcher runs as this user; its PID is in this PID namespace (a wrapper's namespace would name another).
  if (reply !== null && (!reply.ok || reply.status?.build !== buildOf(spec.script)))
    return { proc: null, refused: sock };
  if (!st || uidOf(st.pid) !== (process.geteuid?.() ?? 0) || st.role !== 'active') {
    sock.destroy();
    return { proc: null, refused: null };
  }
  const child = new AdoptedChild(st.pid);
  proc.c = child;
  proc.pid = st.pid;
  proc.status = st;
  proc.ready = Promise.resolve(st);
  sock.on('close', () => {
    child.ended();
    onExit(proc);
  });
  return { proc, refused: null };
}

/** Releases the watcher on a connection that adoptWatcher left (`refused`). */
export function releaseOn(sock: net.Socket): void {
  sock.on('error', () => {});
  sock.end(`${JSON.stringify({ id: 0, op: 'release' })}\n`);
}

/**
 * A deliberate stop's end of an orphaned watcher (`leash teardown`): asks it to release the host and waits (up to
 * `timeoutMs`) for it to go. False when none waits on `sockPath`.
 */
export async function releaseOrphan(sockPath: string, timeoutMs = 3000): Promise<boolean> {
  if (!trusted(sockPath)) return false;
  const sock = await connect(sockPath, 2000);
  if (!sock) return false;
  return new Promise((resolve) => {
    const t = setTimeout(() => {
      sock.destroy();
      resolve(true);
    }, timeoutMs);
    sock.on('close', () => {
      clearTimeout(t);
      resolve(true);
    });
    sock.on('error', () => {});
    sock.write(`${JSON.stringify({ id: 1, op: 'release' })}\n`);
  });
}
