/**
 * A unix-socket server speaking JSON lines, the wiring the tools socket and the approvals socket share:
 * a stale socket left at the path is removed (anything else there is refused, never removed), every
 * connection's bytes go through the one line reader with a byte limit, each line is parsed strictly, and a
 * connection that sends a line over the limit, a line that is not JSON or one that is not an object is
 * destroyed; the lines left on a destroyed connection are not handled. Who the peer is and what a message
 * does are the caller's (`accept`).
 */
import fs from 'node:fs';
import net from 'node:net';
import { isObject, parseStrict, stringifyAscii, type JsonObject, type JsonValue } from './json.js';
import { LineReader } from './lines.js';

export interface JsonLinesConnection {
  readonly sock: net.Socket;
  /** One line to the peer (nothing once the connection is destroyed). */
  send(v: JsonValue): void;
}

export interface JsonLinesServerOptions {
  path: string;
  /** A line longer than this ends the connection. */
  maxLineBytes: number;
  /** Mode of the socket file once it listens. */
  mode: number;
  /** A new connection: the handler of its messages, or null to refuse it (it is destroyed). */
  accept(conn: JsonLinesConnection): ((msg: JsonObject) => void) | null;
}

export interface JsonLinesServer {
  readonly path: string;
  /** Destroys every connection, stops listening and removes the socket file (only if it is a socket). */
  close(): Promise<void>;
}

/** Removes the socket file at `p`, never anything else there. */
function removeSocketFile(p: string): void {
  if (fs.lstatSync(p).isSocket()) fs.unlinkSync(p);
}

export async function listenJsonLines(o: JsonLinesServerOptions): Promise<JsonLinesServer> {
  const sockPath = o.path;
  const conns = new Set<net.Socket>();
  try {
    removeSocketFile(sockPath);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
  const server = net.createServer((sock) => {
    conns.add(sock);
    sock.on('close', () => conns.delete(sock));
    sock.on('error', () => sock.destroy());
    const send = (v: JsonValue) => {
      if (!sock.destroyed) sock.write(stringifyAscii(v) + '\n');
    };
    const onMessage = o.accept({ sock, send });
    if (!onMessage) {
      sock.destroy();
      return;
    }
    const lines = new LineReader(
      (line) => {
        if (sock.destroyed) return;
        let msg: JsonValue;
        try {
          msg = parseStrict(line);
        } catch {
          sock.destroy();
          return;
        }
        if (!isObject(msg)) return void sock.destroy();
        onMessage(msg);
      },
      () => sock.destroy(),
      { maxBytes: o.maxLineBytes },
    );
    sock.on('data', (chunk: Buffer) => lines.push(chunk));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(sockPath, () => {
      server.off('error', reject);
      resolve();
    });
  });
  fs.chmodSync(sockPath, o.mode);
  return {
    path: sockPath,
    async close() {
      for (const c of conns) c.destroy();
      await new Promise<void>((r) => server.close(() => r()));
      try {
        removeSocketFile(sockPath);
      } catch {
        // already gone
      }
    },
  };
}
