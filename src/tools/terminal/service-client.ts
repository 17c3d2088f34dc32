import net from 'node:net';
import { isObject, parseStrict, stringifyAscii, toPlain } from '../../formats/json.js';
import { LineReader } from '../../formats/lines.js';
import { DEFAULT_TOOLS_SOCKET } from '../../paths.js';
import { validateTerminalPolicy } from './policy-file.js';
import type { PolicySource, TerminalPolicy } from './types.js';

/** The service's tools socket (src/tools/remote/socket.ts), which also answers `commands_policy`. */
export const DEFAULT_SERVICE_SOCKET = DEFAULT_TOOLS_SOCKET;

const MAX_REPLY_BYTES = 1024 * 1024;

/**
 * Asks the service for the caller's resolved commands policy. The request names no user: the
 * service takes the caller's UID from SO_PEERCRED on the socket, so the terminal cannot ask for a
 * policy other than its own account's.
 *
 * The tools socket's wire (newline-delimited JSON, requests carry `seq`, answers echo it):
 *   request  {"seq":1,"op":"commands_policy"}
 *   reply    {"seq":1,"ok":true,"uid":1001,"policy":{"fail_mode":"closed","commands":{...}}}
 *        or  {"seq":1,"ok":false,"error":"no_policy"}     -> null (the caller fails closed)
 * Anything else (no socket, a service that closes on the op, timeout, malformed reply) rejects.
 */
export function fetchServicePolicy(socketPath: string, timeoutMs = 2000): Promise<TerminalPolicy | null> {
  return new Promise((resolve, reject) => {
    const sock = net.createConnection({ path: socketPath });
    let finished = false;
    const finish = (err: Error | null, value?: TerminalPolicy | null): void => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      sock.destroy();
      if (err) reject(err);
      else resolve(value ?? null);
    };
    const timer = setTimeout(
      () => finish(new Error(`policy service ${socketPath}: no reply in ${timeoutMs} ms`)),
      timeoutMs,
    );
    sock.on('connect', () => sock.write(stringifyAscii({ seq: 1, op: 'commands_policy' }) + '\n'));
    sock.on('error', (e: NodeJS.ErrnoException) =>
      finish(new Error(`policy service ${socketPath}: ${e.code ?? e.message}`)),
    );
    const onReply = (line: Buffer): void => {
      if (finished) return;
      let reply: unknown;
      try {
        const v = parseStrict(line);
        if (!isObject(v) || v.seq !== 1) throw new Error('not an answer to our request');
        reply = toPlain(v);
      } catch {
        return finish(new Error(`policy service ${socketPath}: malformed reply`));
      }
      const r = reply as { ok?: unknown; error?: unknown; policy?: unknown };
      if (r?.ok === false && r.error === 'no_policy') return finish(null, null);
      if (r?.ok !== true) return finish(new Error(`policy service ${socketPath}: ${String(r?.error ?? 'refused')}`));
      try {
        finish(null, validateTerminalPolicy(r.policy));
      } catch (e) {
        finish(new Error(`policy service ${socketPath}: invalid policy: ${(e as Error).message}`));
      }
    };
    const lines = new LineReader(onReply, () => finish(new Error(`policy service ${socketPath}: reply too large`)), {
      maxBytes: MAX_REPLY_BYTES,
    });
    sock.on('data', (chunk: Buffer) => lines.push(chunk));
    sock.on('end', () => finish(new Error(`policy service ${socketPath}: closed without a reply`)));
  });
}

/** A policy source that asks the service on every call; any failure is no policy (fail closed). */
export function servicePolicySource(socketPath: string, warn: (msg: string) => void): PolicySource {
  return async () => {
    try {
      return await fetchServicePolicy(socketPath);
    } catch (e) {
      warn((e as Error).message);
      return null;
    }
  };
}
