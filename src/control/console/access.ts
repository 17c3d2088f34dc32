/**
 * Who may use the console, judged on every request before anything is read:
 *   - TCP: the `Host` header must name the listen address or a loopback name for its port (a
 *     DNS-rebinding page is refused, 421 console_host_refused);
 *   - any `Origin` must be the console's own, scheme://Host (403 console_origin_refused); a POST
 *     must carry `content-type: application/json` (a cross-site form cannot, without a preflight
 *     the console never answers);
 *   - the API needs the token (`Authorization: Bearer …`, compared in constant time) or, on the unix
 *     socket, a peer root or approvals.operator by SO_PEERCRED; on the socket a peer any of whose four
 *     UIDs is a subject's is refused even with the token (401 console_unauthorized).
 * The page shell (HTML, script, style) holds no data and is served without the token.
 */
import crypto from 'node:crypto';
import type http from 'node:http';
import type net from 'node:net';
import { judgePeer, type PeerIds } from '../approvals/peer.js';

export interface Refusal {
  status: number;
  code:
    | 'console_unauthorized'
    | 'console_origin_refused'
    | 'console_host_refused'
    | 'console_method_refused'
    | 'console_bad_request';
  message: string;
}

export interface AccessRules {
  token: string;
  /** TCP only: the Host values accepted (`127.0.0.1:8470`, `localhost:8470`, `[::1]:8470`, the listen host). */
  hosts: Set<string> | null;
  scheme: 'http' | 'https';
  isSubject: (uid: number) => boolean;
  operatorUid: () => number | null;
  peer: (sock: net.Socket) => PeerIds | null;
}

export function newToken(): string {
  return crypto.randomBytes(32).toString('base64url');
}

export function tokenMatches(given: string | undefined, token: string): boolean {
  if (!given) return false;
  const a = Buffer.from(given);
  const b = Buffer.from(token);
  return a.length === b.length && crypto.timingSafeEqual(a, b);
}

/** The Host values a TCP listener on host:port answers to. */
export function hostsFor(host: string, port: number): Set<string> {
  const h = host.includes(':') ? `[${host}]` : host;
  return new Set([`${h}:${port}`, `127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`]);
}

/** The checks every request passes first (host, origin, method); null = go on. */
export function checkRequest(req: http.IncomingMessage, rules: AccessRules): Refusal | null {
  const host = req.headers.host ?? '';
  if (rules.hosts !== null && !rules.hosts.has(host.toLowerCase()))
    return { status: 421, code: 'console_host_refused', message: `Host ${JSON.stringify(host)} is not this console` };
  const origin = req.headers.origin;
  if (origin !== undefined && origin !== `${rules.scheme}://${host}`)
    return {
      status: 403,
      code: 'console_origin_refused',
      message: `Origin ${JSON.stringify(origin)} is not this console`,
    };
  const m = req.method ?? '';
  if (m === 'POST') {
    const ct = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    if (ct !== 'application/json')
      return {
        status: 403,
        code: 'console_origin_refused',
        message: 'a POST must carry content-type application/json',
      };
    // A browser always sends Origin on a POST; a script may leave it out, never send a foreign one.
  } else if (m !== 'GET' && m !== 'HEAD')
    return { status: 405, code: 'console_method_refused', message: `${m} is not served` };
  return null;
}

/** Whether this request may read and decide: the token, or on the socket a peer root/operator. */
export function authorise(
  req: http.IncomingMessage,
  rules: AccessRules,
  onSocket: boolean,
): { ok: true; by: string } | Refusal {
  const auth = req.headers.authorization ?? '';
  const bearer = /^Bearer ([A-Za-z0-9_-]{1,200})$/.exec(auth)?.[1];
  if (onSocket) {
    const peer = rules.peer(req.socket);
    const v = judgePeer(peer, rules.isSubject, rules.operatorUid());
    if (v.ok) return { ok: true, by: `uid ${v.uid}` };
    // A subject's process is refused even with the token: the token is not a way around SO_PEERCRED.
    if (peer && peer.uids.some((u) => rules.isSubject(u)))
      return { status: 401, code: 'console_unauthorized', message: v.why };
  }
  if (tokenMatches(bearer, rules.token)) return { ok: true, by: 'token' };
  return {
    status: 401,
    code: 'console_unauthorized',
    message: 'the console needs its token (Authorization: Bearer …)',
  };
}
