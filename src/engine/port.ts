/**
 * Ports: the `:port` suffix of a network entry, and the per-key set of rules that may pin one.
 */

/**
 * Parses a decimal port 1..65535. Returns null for anything else (empty, non-digits, signs,
 * 0, > 65535), so `host:0`, `host:http` and `host:99999` are inert rather than guessed at.
 */
export function parsePort(s: string): number | null {
  if (s.length === 0 || s.length > 5) return null;
  let v = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 48 || c > 57) return null;
    v = v * 10 + (c - 48);
  }
  return v >= 1 && v <= 65535 ? v : null;
}

/**
 * The rules attached to one index key (a domain, a CIDR, a path): entries without a port match
 * any port; `host:port` entries match that port only. The first entry added for a slot is the one
 * reported, so a verdict's `rule` is stable across recompiles of the same list.
 */
/** PortRules.match sentinel: an entry admitting some port matches (a DNS name an allow entry could reach). */
export const SOME_PORT = -1;
/** PortRules.match sentinel: only an entry covering every port matches (a deny that blocks the name outright). */
export const ALL_PORTS = -2;

export class PortRules {
  private anyPort: string | null = null;
  private byPort: Map<number, string> | null = null;

  /** Adds an entry, optionally pinned to one port. */
  add(rule: string, port: number | null): void {
    if (port === null) {
      if (this.anyPort === null) this.anyPort = rule;
      return;
    }
    if (this.byPort === null) this.byPort = new Map();
    if (!this.byPort.has(port)) this.byPort.set(port, rule);
  }

  /**
   * The entry matching `port` (a pinned entry is more specific, so it is preferred), or null.
   * Two sentinels judge a name without a port (a DNS query): SOME_PORT matches when an entry
   * admits some port, ALL_PORTS only an entry that covers every port.
   */
  match(port: number): string | null {
    if (port === SOME_PORT) {
      if (this.anyPort !== null) return this.anyPort;
      if (this.byPort !== null) for (const r of this.byPort.values()) return r;
      return null;
    }
    if (this.byPort !== null) {
      const r = this.byPort.get(port);
      if (r !== undefined) return r;
    }
    return this.anyPort;
  }
}
