import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { promisify } from 'node:util';
import { LeashError } from '../../errors.js';

/** The prefix Sentinel mints agent accounts with: the only thing discovery keys on. */
export const AGENT_PREFIX = 'leash-';

export interface PasswdEntry {
  name: string;
  uid: number;
  gid: number;
  gecos: string;
  home: string;
}

export type SubjectKind = 'user' | 'agent';

/** A leashed UID: the configured user (resolves to the floor) or a `leash-*` agent account. */
export interface Subject {
  kind: SubjectKind;
  account: string;
  uid: number;
}

export interface Discovery {
  /** `single`: no agent accounts, the original single-subject path (no /var/lib/leash). */
  mode: 'single' | 'multi';
  subjects: Subject[];
  /** Every passwd entry read: scopes are checked against it. */
  accounts: PasswdEntry[];
  /** Said out loud by the service, never silently dropped. */
  warnings: string[];
}

export type PasswdSource = { path: string } | { getent: true };

/**
 * The account database through NSS (`getent passwd`: every source nsswitch.conf names, so
 * `leash-*` accounts from LDAP, sssd or extrausers count), or LEASH_PASSWD: a passwd(5) file
 * (tests), or `getent`. Enumeration is what NSS offers: a source that does not enumerate (sssd
 * with `enumerate = false`, its default) lists no account, and its agents are not discovered.
 */
export function defaultPasswdSource(): PasswdSource {
  const v = process.env.LEASH_PASSWD;
  return v === undefined || v === '' || v === 'getent' ? { getent: true } : { path: v };
}

// A directory of tens of thousands of accounts is megabytes of text; a slow directory server gets time.
const GETENT = { timeout: 30_000, maxBuffer: 256 << 20 } as const;

/** Parses passwd(5) text. A malformed line is skipped with a warning, not a reason to look no further. */
export function parsePasswd(text: string, warnings: string[] = []): PasswdEntry[] {
  const out: PasswdEntry[] = [];
  for (const [i, raw] of text.split('\n').entries()) {
    const line = raw.trimEnd();
    if (line === '' || line.startsWith('#')) continue;
    const f = line.split(':');
    const uid = Number(f[2]);
    const gid = Number(f[3]);
    if (f.length < 7 || !f[0] || !Number.isInteger(uid) || uid < 0 || !Number.isInteger(gid)) {
      warnings.push(`passwd line ${i + 1} is malformed and was skipped`);
      continue;
    }
    out.push({ name: f[0], uid, gid, gecos: f[4] ?? '', home: f[5] ?? '' });
  }
  return out;
}

/**
 * Reads the account database. Any failure is wholesale (`passwd_unreadable`): "I could not
 * look" must never turn into "there is nobody to confine".
 */
export function readPasswd(source: PasswdSource = defaultPasswdSource(), warnings: string[] = []): PasswdEntry[] {
  let text: string;
  try {
    text =
      'path' in source
        ? fs.readFileSync(source.path, 'utf8')
        : execFileSync('getent', ['passwd'], { encoding: 'utf8', ...GETENT, stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    throw unreadable(source, e);
  }
  return entriesOf(text, warnings);
}

/**
 * readPasswd without blocking the event loop (the service: its proxy and gate keep answering while
 * a directory server enumerates).
 */
export async function readPasswdAsync(
  source: PasswdSource = defaultPasswdSource(),
  warnings: string[] = [],
): Promise<PasswdEntry[]> {
  let text: string;
  try {
    text =
      'path' in source
        ? await fs.promises.readFile(source.path, 'utf8')
        : (await promisify(execFile)('getent', ['passwd'], { encoding: 'utf8', ...GETENT })).stdout;
  } catch (e) {
    throw unreadable(source, e);
  }
  return entriesOf(text, warnings);
}

function unreadable(source: PasswdSource, e: unknown): LeashError {
  const where = 'path' in source ? source.path : 'getent passwd';
  return new LeashError(
    'passwd_unreadable',
    `cannot read ${where}: ${(e as Error).message}`,
    { source: where },
    { cause: e },
  );
}

function entriesOf(text: string, warnings: string[]): PasswdEntry[] {
  const entries = parsePasswd(text, warnings);
  if (entries.length === 0) {
    throw new LeashError('passwd_unreadable', 'the account database returned no accounts at all', {});
  }
  return entries;
}

/** Subjects from a passwd read: the configured user plus every `leash-*` account. */
export function discoverFrom(
  entries: PasswdEntry[],
  configuredUser: string | null,
  warnings: string[] = [],
): Discovery {
  const subjects: Subject[] = [];
  const seenUid = new Map<number, string>();
  if (configuredUser) {
    const u = entries.find((e) => e.name === configuredUser);
    if (u) {
      subjects.push({ kind: 'user', account: u.name, uid: u.uid });
      seenUid.set(u.uid, u.name);
    } else warnings.push(`configured user ${configuredUser} is not in passwd`);
  }
  for (const e of entries) {
    if (!e.name.startsWith(AGENT_PREFIX) || e.name === configuredUser) continue;
    if (e.uid === 0) {
      // Denying every open of UID 0 would stop the host, not an agent.
      warnings.push(`${e.name} has UID 0 and is not confined: give it its own UID`);
      continue;
    }
    const other = seenUid.get(e.uid);
    if (other !== undefined) {
      warnings.push(`${e.name} shares UID ${e.uid} with ${other}: the first account's policy applies to both`);
      continue;
    }
    seenUid.set(e.uid, e.name);
    subjects.push({ kind: 'agent', account: e.name, uid: e.uid });
  }
  const mode = subjects.some((s) => s.kind === 'agent') ? 'multi' : 'single';
  return { mode, subjects, accounts: entries, warnings };
}

/** Reads passwd and discovers subjects; throws `passwd_unreadable` on a read failure. */
export function discover(configuredUser: string | null, source: PasswdSource = defaultPasswdSource()): Discovery {
  const warnings: string[] = [];
  const entries = readPasswd(source, warnings);
  return discoverFrom(entries, configuredUser, warnings);
}

/** discover, reading the account database without blocking the event loop. */
export async function discoverAsync(
  configuredUser: string | null,
  source: PasswdSource = defaultPasswdSource(),
): Promise<Discovery> {
  const warnings: string[] = [];
  const entries = await readPasswdAsync(source, warnings);
  return discoverFrom(entries, configuredUser, warnings);
}
