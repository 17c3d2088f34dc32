import fs from 'node:fs';
import path from 'node:path';
import { LeashError } from '../../errors.js';
import { atomicWriteFileSync, withFileLock } from '../../store/files.js';

export { dnsPortFor, PORT_BLOCKS, PORT_MAX, PORT_MIN, PORT_RESERVED } from '../../dataplane/network/ports.js';
import { PORT_MAX, PORT_MIN, PORT_RESERVED, dnsPortFor } from '../../dataplane/network/ports.js';

export interface PortEntry {
  port: number;
  uid: number;
}
/** account -> port, for the account's life. Entries are never removed: a port is never returned to the pool. */
export type PortMap = Record<string, PortEntry>;

export function portsFile(stateDir: string): string {
  return path.join(stateDir, 'ports.json');
}

function corrupt(file: string, why: string): LeashError {
  return new LeashError('ports_corrupt', `${file} is corrupt (${why}); nothing was changed`, { file });
}

/** Reads the port map; a missing file is an empty map, anything unreadable or malformed is `ports_corrupt`. */
export function readPorts(stateDir: string): PortMap {
  const file = portsFile(stateDir);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw corrupt(file, (e as Error).message);
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw corrupt(file, (e as Error).message);
  }
  const ports = (doc as { ports?: unknown } | null)?.ports;
  if (typeof ports !== 'object' || ports === null || Array.isArray(ports)) throw corrupt(file, 'no ports map');
  const used = new Set<number>();
  const out: PortMap = {};
  for (const [account, v] of Object.entries(ports as Record<string, unknown>)) {
    const e = v as { port?: unknown; uid?: unknown } | null;
    const port = e?.port;
    const uid = e?.uid;
    if (
      typeof port !== 'number' ||
      !Number.isInteger(port) ||
      port < PORT_MIN ||
      port > PORT_MAX ||
      port === PORT_RESERVED
    )
      throw corrupt(file, `${account}: port out of range`);
    if (typeof uid !== 'number' || !Number.isInteger(uid) || uid < 0) throw corrupt(file, `${account}: bad uid`);
    if (used.has(port)) throw corrupt(file, `port ${port} assigned twice`);
    used.add(port);
    out[account] = { port, uid };
  }
  return out;
}

export interface PortAssignment {
  ports: PortMap;
  /** Accounts no port could be found for: each fails alone. */
  unassigned: string[];
  /** Whether the file was written (only when a new account got a port). */
  written: boolean;
}

/**
 * Gives every account in `accounts` a port, keeping every existing assignment (including those of
 * accounts that have left discovery). Writes atomically under the port-map lock only if something
 * was added. A corrupt map throws `ports_corrupt` and writes nothing.
 */
export async function assignPorts(
  stateDir: string,
  accounts: { account: string; uid: number }[],
): Promise<PortAssignment> {
  const file = portsFile(stateDir);
  const assign = (): PortAssignment => {
    const ports = readPorts(stateDir);
    const used = new Set(Object.values(ports).flatMap((e) => [e.port, dnsPortFor(e.port)]));
    const reserved = (p: number) => p === PORT_RESERVED || p === dnsPortFor(PORT_RESERVED);
    const unassigned: string[] = [];
    let next = PORT_MIN;
    let added = false;
    for (const a of accounts) {
      const held = ports[a.account];
      if (held) {
        // Same account name, new UID (recreated): it keeps its port; the map follows the UID.
        if (held.uid !== a.uid) {
          ports[a.account] = { port: held.port, uid: a.uid };
          added = true;
        }
        continue;
      }
      while (
        next <= PORT_MAX &&
        (used.has(next) || used.has(dnsPortFor(next)) || reserved(next) || reserved(dnsPortFor(next)))
      )
        next++;
      if (next > PORT_MAX) {
        unassigned.push(a.account);
        continue;
      }
      ports[a.account] = { port: next, uid: a.uid };
      used.add(next);
      used.add(dnsPortFor(next));
      added = true;
    }
    if (added) atomicWriteFileSync(file, `${JSON.stringify({ version: 1, ports }, null, 2)}\n`);
    return { ports, unassigned, written: added };
  };
  // Fast path without the lock when nothing is new (the common reconcile).
  const current = readPorts(stateDir);
  if (accounts.every((a) => current[a.account]?.uid === a.uid))
    return { ports: current, unassigned: [], written: false };
  fs.mkdirSync(stateDir, { recursive: true, mode: 0o750 });
  return withFileLock(file, assign);
}
