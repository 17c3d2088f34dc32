/**
 * Starts the console from a config, the same way for `leash console` (its own process) and for the
 * service (console.enabled): the approvals socket as its queue, the decision log file as its source
 * of decisions, passwd for who is a subject (re-read at most every 2 s), and the token written next
 * to the socket (`<socket>.token`, 0600) so `leash console --url` can print it.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Config } from '../config/types.js';
import { DEFAULT_APPROVALS_SOCKET } from '../approvals/socket.js';
import { defaultPasswdSource, discoverFrom, readPasswd, type PasswdEntry } from '../subjects/discovery.js';
import { socketApprovals } from './approvals.js';
import { startConsole, type ConsoleOptions, type ConsoleServer } from './server.js';

export interface LaunchOptions {
  config: () => Config;
  stateDir: string;
  socket?: string | null;
  listen?: string | null;
  tls?: { cert: string; key: string } | null;
  approvalsSocket?: string;
  token?: string;
  onError?: (e: Error) => void;
  hub?: ConsoleOptions['hub'];
}

export function tokenFile(socket: string): string {
  return `${socket}.token`;
}

export async function launchConsole(o: LaunchOptions): Promise<ConsoleServer> {
  const c = o.config();
  let entries: PasswdEntry[] = [];
  let read = 0;
  const passwd = () => {
    if (Date.now() - read > 2000) {
      try {
        entries = readPasswd(defaultPasswdSource());
      } catch {
        // keep the last good list
      }
      read = Date.now();
    }
    return entries;
  };
  const socket = o.socket !== undefined ? o.socket : c.console.socket;
  if (socket) fs.mkdirSync(path.dirname(socket), { recursive: true, mode: 0o755 });
  const decisions = c.logging.decisions;
  const srv = await startConsole({
    config: o.config,
    stateDir: o.stateDir,
    approvals: socketApprovals(o.approvalsSocket ?? process.env.LEASH_APPROVALS_SOCKET ?? DEFAULT_APPROVALS_SOCKET),
    decisionsPath: decisions === 'stdout' ? null : decisions,
    socket,
    listen: o.listen !== undefined ? o.listen : c.console.listen,
    tls: o.tls !== undefined ? o.tls : c.console.tls,
    ...(o.token ? { token: o.token } : {}),
    isSubject: (uid) => discoverFrom(passwd(), o.config().user).subjects.some((s) => s.uid === uid),
    operatorUid: () => {
      const op = o.config().approvals.operator;
      return op === null ? null : (passwd().find((e) => e.name === op)?.uid ?? null);
    },
    ...(o.onError ? { onError: o.onError } : {}),
    ...(o.hub ? { hub: o.hub } : {}),
  });
  if (socket) {
    const f = tokenFile(socket);
    fs.rmSync(f, { force: true });
    fs.writeFileSync(f, `${srv.token}\n${srv.url ?? ''}\n`, { mode: 0o600, flag: 'wx' });
    const close = srv.close;
    return {
      ...srv,
      token: srv.token,
      url: srv.url,
      close: async () => {
        await close();
        fs.rmSync(f, { force: true });
      },
    };
  }
  return srv;
}
