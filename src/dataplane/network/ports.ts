/** The port pairs of the per-subject listeners (proxy and DNS forwarder); the allocator is control/subjects/ports.ts. */
export const PORT_MIN = 18000;
/**
 * The range is blocks of 1,000 ports from PORT_MIN (18000-18999, 19000-19999, 20000-20999), each 500 pairs: room
 * for 1,499 subjects. A map written when the range was the first block alone reads the same (its pairs are the
 * first block's).
 */
export const PORT_BLOCKS = 3;
export const PORT_MAX = PORT_MIN + PORT_BLOCKS * 1000 - 1;
/** The single-subject listener's port: never handed to an account. */
export const PORT_RESERVED = 18443;

/**
 * Each subject holds a pair of ports: its proxy port and its DNS forwarder's port, 500 apart in the same block
 * (18000-18499 with 18500-18999, 19000-19499 with 19500-19999, ...). The allocator hands out a pair only when both
 * halves are free, so a map written before the forwarder existed (ports anywhere in the first block) keeps
 * working: the forwarder's port is the other half.
 */
export function dnsPortFor(port: number): number {
  return (port - PORT_MIN) % 1000 < 500 ? port + 500 : port - 500;
}

/**
 * SO_MARK of every Leash listener (proxy and DNS forwarder, both families). The input guard (nft/render.ts) lets a
 * connection or datagram Leash redirected reach a socket on these ports only when it carries this mark; setting a
 * mark takes CAP_NET_ADMIN, so a port taken by another local process (or the agent itself) while no service
 * listens, after a crash, meets a reset instead of the agent's traffic.
 */
export const LISTENER_MARK = 0x1ea5e;
