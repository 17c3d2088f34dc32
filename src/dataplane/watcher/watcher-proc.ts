// One watcher process as the supervisor sees it (supervisor.ts): spawning it with the current map
// (active, or standby of the active's group and in-flight table), its fd-3 channel with the
// requests waiting for their acknowledgement, the deadline for acknowledging the map, and stopping it.
// What happens when it exits (respawn, takeover) is takeover.ts.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import type net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { LeashError } from '../../errors.js';
import type { WatcherSubject } from './addon.js';
import {
  lineReader,
  type FromWatcher,
  type ToWatcher,
  type WatcherAsk,
  type WatcherEvent,
  type WatcherStatus,
} from './protocol.js';
import { pidNsOf } from './pidns.js';

export type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
export type Request = DistributiveOmit<ToWatcher, 'id'>;

interface Pending {
  resolve: (m: FromWatcher) => void;
  reject: (e: Error) => void;
}

/** What the supervisor needs of a watcher process: a spawned child, or an orphan it adopted (adopt.ts). */
export interface Child {
  readonly exitCode: number | null;
  readonly signalCode: NodeJS.Signals | null;
  kill(signal?: NodeJS.Signals): boolean;
  once(event: 'exit', listener: () => void): unknown;
}

/** One watcher process: its channel, its pending requests, and whether it has acknowledged its map. */
export interface Proc {
  c: Child;
  chan: net.Socket | null;
  pending: Map<number, Pending>;
  pid: number | null;
  status: WatcherStatus | null;
  ready: Promise<WatcherStatus>;
  role: 'active' | 'standby';
  /** A standby: the active it was spawned for. */
  of?: Proc;
  /** A standby that said it took over the group (takeover.ts). */
  tookOver?: boolean;
  /** A standby the supervisor ended itself (it missed a map change): replaced, not counted as a death. */
  retired?: boolean;
}

/** How every watcher of one supervisor is spawned. */
export interface SpawnSpec {
  script: string;
  decisions: string;
  watch?: string[];
  wrap?: string[];
  args?: string[];
  env?: NodeJS.ProcessEnv;
  stderr?: 'inherit' | ((chunk: string) => void);
  readyTimeoutMs?: number;
  /** A held event the watcher asks about (hold-relay.ts). */
  onAsk?: (p: Proc, a: WatcherAsk) => void;
  /** A standby took over the group (its claim on the in-flight table landed first). */
  onTakeover?: (p: Proc) => void;
  /** The socket a watcher orphaned by this service's end waits on, and where the next start adopts it (adopt.ts). */
  adoptSocket?: string;
}

/** What the processes of one supervisor share: request ids, the map they start with, the end state. */
export interface Channels {
  nextId: number;
  fatal: LeashError | null;
  readonly map: Map<number, WatcherSubject>;
}

export function defaultScript(): string {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const local = path.join(here, 'watcher-main.js');
  if (fs.existsSync(local)) return local;
  // Running from TypeScript sources (tests): use the built watcher.
  return path.resolve(here, '..', '..', '..', 'dist', 'src', 'dataplane', 'watcher', 'watcher-main.js');
}

/** Sends one request on `p`'s channel; resolves with its acknowledgement, rejects when `p` exits first. */
export function request(ch: Channels, p: Proc | null, msg: Request): Promise<FromWatcher> {
  return new Promise((resolve, reject) => {
    if (!p || !p.chan || ch.fatal) {
      reject(ch.fatal ?? new Error('watcher not running'));
      return;
    }
    const id = ch.nextId++;
    p.pending.set(id, { resolve, reject });
    p.chan.write(`${JSON.stringify({ ...msg, id })}\n`);
  });
}

export function endProc(p: Proc): void {
  p.chan?.destroy();
  p.c.kill('SIGTERM');
}

/**
 * Spawns a watcher and sends it the current map (`init`); `ready` resolves with its status once it has
 * acknowledged it, and rejects (the watcher ended) when it does not in time. `onExit` runs when it exits.
 */
export function spawnProc(
  ch: Channels,
  spec: SpawnSpec,
  role: 'active' | 'standby',
  of: WatcherStatus | undefined,
  onExit: (p: Proc) => void,
): Proc {
  const extra =
    role === 'standby' && of
      ? ['--standby-of', String(of.pid), '--group-fd', String(of.groupFd), '--table-fd', String(of.tableFd)]
      : [];
  const argv = [
    ...(spec.wrap ?? []),
    process.execPath,
    spec.script,
    '--decisions',
    spec.decisions,
    ...(spec.args ?? []),
    // A standby too: once it has taken over, it is the one a service's end orphans.
    ...(spec.adoptSocket ? ['--adopt-socket', spec.adoptSocket] : []),
    ...extra,
  ];
  const stderrMode = spec.stderr === undefined || spec.stderr === 'inherit' ? 'inherit' : 'pipe';
  const c = spawn(argv[0]!, argv.slice(1), {
    stdio: ['ignore', 'inherit', stderrMode, 'pipe'],
    env: spec.env ?? process.env,
  });
  const proc: Proc = {
    c,
    chan: c.stdio[3] as net.Socket,
    pending: new Map(),
    pid: null,
    status: null,
    ready: Promise.resolve(null as unknown as WatcherStatus),
    role,
  };
  wireChannel(proc, spec);
  if (typeof spec.stderr === 'function') {
    const cb = spec.stderr;
    c.stderr!.on('data', (b: Buffer) => cb(b.toString()));
  }
  c.on('exit', () => onExit(proc));
  const timeoutMs = spec.readyTimeoutMs ?? 10_000;
  const init = request(ch, proc, { op: 'init', subjects: [...ch.map.values()], watch: spec.watch ?? [] });
  proc.ready = new Promise<WatcherStatus>((resolve, reject) => {
    const t = setTimeout(() => {
      // A watcher that never acknowledges is as good as dead: end it (closing its channel makes
      // it exit; SIGTERM reaches it through a timeout(1) wrapper) and let the exit path decide.
      endProc(proc);
      reject(new Error('watcher did not acknowledge its map in time'));
    }, timeoutMs);
    init.then(
      (m) => {
        clearTimeout(t);
        if (m.ok && m.status) {
          // A watcher a wrapper put in a PID namespace of its own reports its PID there, which names another
          // process here (its namespace's init is 1): never signalled, and no standby can take its group by it.
          const mine = pidNsOf();
          proc.pid = m.status.pidNs != null && mine !== null && m.status.pidNs !== mine ? null : m.status.pid;
          proc.status = m.status;
          resolve(m.status);
        } else {
          endProc(proc);
          reject(new Error(m.ok ? 'no status' : m.error));
        }
      },
      (e: Error) => {
        clearTimeout(t);
        reject(e);
      },
    );
  });
  proc.ready.catch(() => {});
  return proc;
}

/** Routes what the watcher sends on `proc`'s channel: acknowledgements to their requests, asks and takeovers to `spec`. */
export function wireChannel(proc: Proc, spec: SpawnSpec): void {
  const s = proc.chan!;
  s.on(
    'data',
    lineReader<FromWatcher | WatcherEvent>(
      (m) => {
        if ('ask' in m) {
          spec.onAsk?.(proc, m.ask);
          return;
        }
        if ('takeover' in m) {
          spec.onTakeover?.(proc);
          return;
        }
        const p = proc.pending.get(m.id);
        if (!p) return;
        proc.pending.delete(m.id);
        p.resolve(m);
      },
      () => {},
    ),
  );
  s.on('error', () => {});
}

/** Ends a watcher and waits for it: its channel closed and SIGTERM, then SIGKILL after 3 s. */
export async function stopProc(p: Proc | null): Promise<void> {
  if (!p || p.c.exitCode !== null || p.c.signalCode !== null) return;
  const exited = new Promise<void>((r) => p.c.once('exit', () => r()));
  // A release, not just the channel's end: a watcher whose channel ends unasked waits for the next service.
  p.chan?.end(`${JSON.stringify({ id: 0, op: 'release' })}\n`);
  p.c.kill('SIGTERM');
  const wpid = p.pid;
  const t = setTimeout(() => {
    // The watcher is our grandchild under a wrapper: kill it by its own PID, then the wrapper.
    if (wpid)
      try {
        process.kill(wpid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    p.c.kill('SIGKILL');
  }, 3000);
  await exited;
  clearTimeout(t);
}
