/**
 * Marks the listeners Node opens (the DNS forwarder's, the stream-way proxy's) with LISTENER_MARK, as the native
 * acceptor marks its own: the input guard resets redirected traffic that would reach an unmarked socket.
 */
import type dgram from 'node:dgram';
import type net from 'node:net';
import { nativeProxy } from '../../native.js';
import { LISTENER_MARK } from './ports.js';

interface FdHandle {
  fd?: number;
}

function markFd(fd: number | undefined, what: string): void {
  if (typeof fd !== 'number' || fd < 0) throw new Error(`cannot mark ${what}: no descriptor`);
  nativeProxy().setMark(fd, LISTENER_MARK);
}

/** A listening net.Server (its handle's descriptor exists once listen has called back). */
export function markServer(srv: net.Server): void {
  markFd((srv as unknown as { _handle?: FdHandle })._handle?.fd, 'a TCP listener');
}

/**
 * A bound UDP socket. Its handle sits under Node's internal state symbol: `socket._handle` is deprecated (DEP0112)
 * and would print a warning in the service's log.
 */
export function markUdp(sock: dgram.Socket): void {
  const sym = Object.getOwnPropertySymbols(sock).find((s) => s.description === 'state symbol');
  const state = sym ? (sock as unknown as Record<symbol, { handle?: FdHandle }>)[sym] : undefined;
  markFd(state?.handle?.fd, 'a UDP socket');
}
