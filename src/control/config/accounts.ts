import { execFileSync } from 'node:child_process';
import fs from 'node:fs';

export interface Account {
  name: string;
  uid: number;
  gid: number;
  home: string;
}

function parsePasswdLine(line: string): Account | null {
  const f = line.split(':');
  if (f.length < 7) return null;
  const uid = Number(f[2]);
  const gid = Number(f[3]);
  if (!Number.isInteger(uid) || !Number.isInteger(gid)) return null;
  return { name: f[0]!, uid, gid, home: f[5]! };
}

/**
 * Looks an account up the way the rest of the system does: `getent passwd` (so NSS sources such as
 * sssd count), falling back to reading /etc/passwd when getent is absent. null = no such account.
 */
export function lookupAccount(name: string): Account | null {
  try {
    const out = execFileSync('getent', ['passwd', '--', name], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    return parsePasswdLine(out.trim().split('\n')[0] ?? '');
  } catch (e) {
    // getent exits 2 for "not found"; anything else (ENOENT: no getent) falls back to the file.
    if ((e as { status?: number }).status === 2) return null;
  }
  try {
    for (const line of fs.readFileSync('/etc/passwd', 'utf8').split('\n')) {
      const a = parsePasswdLine(line);
      if (a && a.name === name) return a;
    }
  } catch {
    /* unreadable passwd: treated as unknown */
  }
  return null;
}

/** The name of group `gid` (getent group, then /etc/group); the number itself when it has none. */
export function groupName(gid: number): string {
  try {
    const out = execFileSync('getent', ['group', String(gid)], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    const name = out.split(':')[0];
    if (name) return name;
  } catch {
    /* not found, or no getent: the file */
  }
  try {
    for (const line of fs.readFileSync('/etc/group', 'utf8').split('\n')) {
      const f = line.split(':');
      if (f.length >= 3 && Number(f[2]) === gid && f[0]) return f[0];
    }
  } catch {
    /* unreadable: the number */
  }
  return String(gid);
}
