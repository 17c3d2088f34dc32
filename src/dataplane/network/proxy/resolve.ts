/**
 * Where an allowed name goes: the proxy's own resolution of a domain (through the configured resolvers, cached by
 * the answer's TTL), never the address the agent supplied. Owns the cache; knows nothing of sockets or policy.
 */
import dns from 'node:dns';
import net from 'node:net';
import os from 'node:os';

/** A name's addresses, split by family, with when the answer expires (ms since the epoch; 0 = not cached). */
export interface Resolved {
  v4: string[];
  v6: string[];
  expires: number;
}

/** `::ffff:a.b.c.d` -> `a.b.c.d`, lower case: one spelling per address for comparisons. */
export function plainIp(a: string): string {
  return a.toLowerCase().replace(/^::ffff:(\d+\.\d+\.\d+\.\d+)$/, '$1');
}

let ownAddrs: { at: number; set: Set<string> } = { at: 0, set: new Set() };
/** This host's own interface addresses (a connection to one is delivered locally), re-read at most every 5 s. */
export function ownAddresses(): Set<string> {
  const now = Date.now();
  if (now - ownAddrs.at > 5000) {
    const set = new Set<string>();
    for (const list of Object.values(os.networkInterfaces()))
      for (const a of list ?? []) set.add(a.address.replace(/%.*$/, ''));
    ownAddrs = { at: now, set };
  }
  return ownAddrs.set;
}

/**
 * A resolver for the proxy: `override` (tests, a lab) replaces the DNS lookups and is never cached; otherwise A and
 * AAAA go to `servers` (the host's resolvers when empty) and an answer with addresses is kept for its TTL (1-300 s).
 */
export function createNameResolver(
  servers: string[],
  override?: (name: string) => Promise<string[]>,
  /** Told each answer as it is cached. */
  onCache?: (name: string, r: Resolved) => void,
): (name: string) => Promise<Resolved> {
  if (override) {
    return async (name) => {
      const all = (await override(name)).map((a) => plainIp(a));
      return { v4: all.filter((a) => net.isIPv4(a)), v6: all.filter((a) => net.isIPv6(a)), expires: 0 };
    };
  }
  const resolver = new dns.promises.Resolver({ timeout: 2000, tries: 2 });
  if (servers.length) resolver.setServers(servers);
  const cache = new Map<string, Resolved>();
  // One lookup in flight per name: a burst of connections to one name (hundreds approved at once, a client opening
  // many) waits for the same answer instead of sending two queries each. Measured without it: 499 lookups at once
  // for one name against a resolver on loopback, 243 came back with no address (the proxy then refused those
  // connections, resolve_failed).
  const inflight = new Map<string, Promise<Resolved>>();
  const lookup = async (name: string): Promise<Resolved> => {
    const [a, aaaa] = await Promise.allSettled([
      resolver.resolve4(name, { ttl: true }),
      resolver.resolve6(name, { ttl: true }),
    ]);
    const v4 = a.status === 'fulfilled' ? a.value : [];
    const v6 = aaaa.status === 'fulfilled' ? aaaa.value : [];
    const ttl = Math.min(300, Math.max(1, ...[...v4, ...v6].map((r) => r.ttl)));
    const out = {
      v4: v4.map((r) => r.address),
      v6: v6.map((r) => r.address.toLowerCase()),
      expires: Date.now() + ttl * 1000,
    };
    if (out.v4.length || out.v6.length) {
      cache.set(name, out);
      onCache?.(name, out);
    }
    return out;
  };
  return (name) => {
    const hit = cache.get(name);
    if (hit && hit.expires > Date.now()) return Promise.resolve(hit);
    let p = inflight.get(name);
    if (!p) {
      p = lookup(name).finally(() => inflight.delete(name));
      inflight.set(name, p);
    }
    return p;
  };
}

/** `localhost` and names under it (RFC 6761): always loopback, never asked of a resolver. */
function isLocalhostName(name: string): boolean {
  return name === 'localhost' || name.endsWith('.localhost');
}

const LOCALHOST: Resolved = { v4: ['127.0.0.1'], v6: ['::1'], expires: 0 };

/**
 * What `domain` resolves to for a connection to `ip`: `ip` itself when the subject's own DNS answers gave it for
 * this name (`told`), loopback for `localhost` names (never asked), else `resolve`'s answer (none on a failure).
 */
export async function resolveName(
  ip: string,
  domain: string,
  told: string[],
  resolve: (name: string) => Promise<Resolved>,
): Promise<Resolved> {
  if (told.includes(ip)) return { v4: [ip], v6: [], expires: 0 };
  if (isLocalhostName(domain)) return LOCALHOST;
  try {
    return await resolve(domain);
  } catch {
    return { v4: [], v6: [], expires: 0 };
  }
}
