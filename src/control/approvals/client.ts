/**
 * A client of the approvals socket (./socket.ts): one connection, `call` sends a request and resolves
 * with the reply of the same seq, events go to `onEvent`. Used by `leash approvals` and the console.
 */
import net from 'node:net';
import { LeashError, type ErrorCode } from '../../errors.js';
import { LineReader } from '../../formats/lines.js';
import type { PendingView, QueueEvent } from './queue.js';

export interface Reply {
  seq?: number;
  ok?: boolean;
  requests?: PendingView[];
  outcome?: { action: string; reason: string };
  error?: { code: string; message: string };
  event?: string;
}

/** One connection: `call` sends a request and resolves with the reply of the same seq; events go to `onEvent`. */
export async function connect(path: string, onEvent?: (ev: QueueEvent) => void) {
  const sock = net.createConnection(path);
  await new Promise<void>((resolve, reject) => {
    sock.once('connect', resolve);
    sock.once('error', (e: NodeJS.ErrnoException) =>
      reject(
        new LeashError('approvals_unreachable', `cannot reach the approvals socket ${path}: ${e.code ?? e.message}`, {
          socket: path,
        }),
      ),
    );
  });
  let seq = 0;
  const waiting = new Map<number, (r: Reply) => void>();
  let closedWith: LeashError | null = null;
  const reader = new LineReader(
    (line) => {
      let r: Reply;
      try {
        r = JSON.parse(line.toString('utf8')) as Reply;
      } catch {
        return;
      }
      if (typeof r.seq === 'number' && waiting.has(r.seq)) {
        waiting.get(r.seq)!(r);
        waiting.delete(r.seq);
      } else if (r.event) onEvent?.(r as unknown as QueueEvent);
    },
    () => sock.destroy(),
    { maxBytes: 16 * 1024 * 1024 },
  );
  sock.on('data', (c: Buffer) => reader.push(c));
  const closed = new Promise<void>((resolve) => {
    sock.on('close', () => {
      closedWith ??= new LeashError('approvals_unreachable', 'the approvals socket closed the connection');
      for (const w of waiting.values()) w({ ok: false, error: { code: closedWith.code, message: closedWith.message } });
      waiting.clear();
      resolve();
    });
  });
  sock.on('error', () => {});
  const call = (msg: Record<string, unknown>): Promise<Reply> => {
    const s = ++seq;
    return new Promise<Reply>((resolve) => {
      waiting.set(s, resolve);
      sock.write(JSON.stringify({ ...msg, seq: s }) + '\n');
    });
  };
  return { call, closed, close: () => sock.end() };
}

export function check(r: Reply): Reply {
  if (r.ok) return r;
  const code = (r.error?.code ?? 'internal') as ErrorCode;
  throw new LeashError(code, r.error?.message ?? 'the approvals socket refused the request');
}
