import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { isSeq, parseDocument, type Document } from 'yaml';
import { LeashError } from '../errors.js';
import type { Mode, Surface } from '../engine/types.js';
import { entryProblem, type InertEntry } from '../policy-engine.js';
import { lookupAccount, type Account } from './accounts.js';
import { lookalikeEntries, type Lookalike } from './lookalike.js';
import { readPolicyFile } from './strict-yaml.js';
import { parseConfig, type LoadedConfig } from './load.js';

/** The policy file is 0640: root writes it, the leashed user's group may read it, nobody else. */
export const CONFIG_MODE = 0o640;

export interface WriteOptions {
  /** How long to wait for another writer's lock before failing with config_lock_timeout. */
  lockTimeoutMs?: number;
  lookup?: (name: string) => Account | null;
  /** Test seam: runs after the temp file is written and synced, before the rename. */
  beforeRename?: (tmpPath: string) => void;
}

export interface EditResult {
  loaded: LoadedConfig;
  /** False when the edit changed nothing (the mode and owner are re-stated anyway). */
  changed: boolean;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function readLockPid(lockPath: string): number | null {
  try {
    const n = Number.parseInt(fs.readFileSync(lockPath, 'utf8').trim(), 10);
    return Number.isInteger(n) && n > 0 ? n : null;
  } catch {
    return null;
  }
}

/**
 * Breaks a lock whose holder is dead. The lock is first renamed aside so two waiters cannot both
 * delete it: only the one whose rename succeeded goes on, and if what it moved turns out to be a
 * fresh lock (a live writer took it between our read and the rename) it is linked back into place
 * (link never replaces an existing file).
 */
function breakStale(lockPath: string, deadPid: number): void {
  const aside = `${lockPath}.stale.${process.pid}.${crypto.randomBytes(4).toString('hex')}`;
  try {
    fs.renameSync(lockPath, aside);
  } catch {
    return; // someone else broke it first
  }
  if (readLockPid(aside) !== deadPid) {
    try {
      fs.linkSync(aside, lockPath);
    } catch {
      /* a third writer holds it now; it keeps it */
    }
  }
  fs.rmSync(aside, { force: true });
}

/**
 * Runs `fn` holding `<file>.lock`, an O_EXCL lock file holding the writer's pid. A lock whose pid is
 * no longer alive is stale (a writer that crashed) and is broken; a live one is waited for.
 */
export async function withLock<T>(file: string, fn: () => Promise<T> | T, timeoutMs = 10_000): Promise<T> {
  const lockPath = `${file}.lock`;
  const deadline = Date.now() + timeoutMs;
  let emptySince: number | null = null;
  for (;;) {
    try {
      const fd = fs.openSync(lockPath, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o600);
      try {
        fs.writeSync(fd, `${process.pid}\n`);
      } finally {
        fs.closeSync(fd);
      }
      break;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') {
        throw new LeashError('config_write_failed', `directory of ${file} does not exist`, { file });
      }
      if (code !== 'EEXIST') {
        throw new LeashError('config_write_failed', `cannot create lock ${lockPath}: ${code}`, { file, errno: code });
      }
    }
    const holder = readLockPid(lockPath);
    if (holder !== null && !alive(holder)) {
      breakStale(lockPath, holder);
      continue;
    }
    if (holder === null) {
      // Created but not yet written, or written by something else: stale after a grace period.
      emptySince ??= Date.now();
      if (Date.now() - emptySince > 2_000) {
        fs.rmSync(lockPath, { force: true });
        continue;
      }
    } else emptySince = null;
    if (Date.now() > deadline) {
      throw new LeashError(
        'config_lock_timeout',
        `another writer (pid ${holder ?? 'unknown'}) holds ${lockPath}; if no leash command is running, remove that file`,
        { file, lock: lockPath, pid: holder },
      );
    }
    await sleep(20 + Math.floor(Math.random() * 30));
  }
  try {
    return await fn();
  } finally {
    // Only remove the lock if it is still ours (a stale-breaker may have mistaken us for dead).
    if (readLockPid(lockPath) === process.pid) fs.rmSync(lockPath, { force: true });
  }
}

/** The owner of the policy file: root, with the leashed user's primary group (root when unset). */
export function policyOwner(user: string | null, lookup: (n: string) => Account | null = lookupAccount) {
  const acct = user ? lookup(user) : null;
  return { uid: 0, gid: acct ? acct.gid : 0 };
}

/**
 * Replaces `file` with `text` atomically: a temp file in the same directory (so rename stays on one
 * filesystem), written, given its final mode and owner, fsynced, renamed over the old file, and the
 * directory fsynced so the rename itself survives a crash. At no point does a reader see a partial
 * file or a file with a wider mode; on any failure the old file is untouched and the temp removed.
 */
export function atomicWrite(
  file: string,
  text: string,
  owner: { uid: number; gid: number },
  beforeRename?: (tmp: string) => void,
): void {
  const dir = path.dirname(file);
  const tmp = path.join(dir, `.${path.basename(file)}.${process.pid}.${crypto.randomBytes(4).toString('hex')}.tmp`);
  let fd: number | null = null;
  try {
    fd = fs.openSync(tmp, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o600);
    const buf = Buffer.from(text, 'utf8');
    let off = 0;
    while (off < buf.length) off += fs.writeSync(fd, buf, off, buf.length - off);
    if (process.getuid?.() === 0) fs.fchownSync(fd, owner.uid, owner.gid);
    fs.fchmodSync(fd, CONFIG_MODE);
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    fd = null;
    beforeRename?.(tmp);
    fs.renameSync(tmp, file);
  } catch (e) {
    if (fd !== null) fs.closeSync(fd);
    fs.rmSync(tmp, { force: true });
    if (e instanceof LeashError) throw e;
    const code = (e as NodeJS.ErrnoException).code;
    throw new LeashError('config_write_failed', `cannot write ${file}: ${code ?? (e as Error).message}`, {
      file,
      errno: code,
    });
  }
  const dfd = fs.openSync(dir, 'r');
  try {
    fs.fsyncSync(dfd);
  } finally {
    fs.closeSync(dfd);
  }
}

/** Re-states mode 0640 and root:<group> on an existing file (repairs a box installed with a umask). */
export function restateOwnership(file: string, owner: { uid: number; gid: number }): void {
  if (process.getuid?.() === 0) fs.chownSync(file, owner.uid, owner.gid);
  fs.chmodSync(file, CONFIG_MODE);
}

export type Mutator = (doc: Document, current: LoadedConfig | null) => void | Promise<void>;

/**
 * Edits the config under the lock: reads it (or starts from `initialText` when it does not exist),
 * applies `mutate` to the YAML document (comments and layout survive), validates the result with
 * the same loader the service uses, refuses an edit that adds an entry which can never match, and
 * writes atomically. An edit that would leave the config invalid is refused and nothing is written.
 */
export async function editConfig(
  file: string,
  mutate: Mutator,
  opts: WriteOptions & { initialText?: string } = {},
): Promise<EditResult> {
  const lookup = opts.lookup ?? lookupAccount;
  return withLock(
    file,
    async () => {
      let before: string | null = null;
      try {
        // The strict reader: bounded, UTF-8 or refused (never U+FFFD), a regular file.
        before = readPolicyFile(file);
      } catch (e) {
        if (!(e instanceof LeashError && e.code === 'config_missing' && opts.initialText !== undefined)) throw e;
      }
      const baseText = before ?? opts.initialText!;
      // The current file must itself be valid: editing an invalid file would silently keep its errors.
      const current = parseConfig(baseText, file, { lookup });
      const doc = parseDocument(baseText, { uniqueKeys: false });
      if (doc.contents === null) doc.contents = doc.createNode({}) as unknown as typeof doc.contents;
      await mutate(doc, current);
      const after = doc.toString();
      const loaded = parseConfig(after, file, { lookup });
      const key = (i: InertEntry) => `${i.surface}\0${i.list}\0${JSON.stringify(i.entry)}`;
      const had = new Set(current.inert.map(key));
      const added = loaded.inert.filter((i) => !had.has(key(i)));
      if (added.length > 0) {
        const first = added[0]!;
        throw new LeashError(
          'entry_inert',
          `${first.surface} ${first.list} entry ${JSON.stringify(first.entry)} ${first.problem}`,
          {
            kind: 'entry',
            inert_entries: added,
          },
        );
      }
      const lkey = (l: Lookalike) => `${l.surface}\0${l.list}\0${l.entry}`;
      const hadL = new Set(lookalikeEntries(current.config).map(lkey));
      const addedL = lookalikeEntries(loaded.config).filter((l) => !hadL.has(lkey(l)));
      if (addedL.length > 0) {
        const first = addedL[0]!;
        throw new LeashError(
          'entry_lookalike',
          `${first.surface} ${first.list} entry ${JSON.stringify(first.entry)}: ${first.message}`,
          { kind: 'entry', code_point: first.codePoint, entries: addedL },
        );
      }
      const owner = policyOwner(loaded.config.user, lookup);
      const changed = after !== before;
      if (changed) atomicWrite(file, after, owner, opts.beforeRename);
      else restateOwnership(file, owner);
      return { loaded, changed };
    },
    opts.lockTimeoutMs,
  );
}

/** Document edit: append `entry` to `<surface>.<list>` unless present. Returns false if it was there. */
export function addEntry(doc: Document, surface: Surface, list: 'allow' | 'deny', entry: string): boolean {
  const node = doc.getIn([surface, list], true);
  if (isSeq(node)) {
    if (node.items.some((i) => (i as { value?: unknown }).value === entry || i === entry)) return false;
    node.add(doc.createNode(entry));
    return true;
  }
  doc.setIn([surface, list], doc.createNode([entry]));
  return true;
}

/**
 * Removes every item of `surface.list` written exactly as `entry`; returns how many went. The list
 * stays (possibly empty), with the comments of the items that remain.
 */
export function removeEntry(doc: Document, surface: Surface, list: 'allow' | 'deny', entry: string): number {
  const node = doc.getIn([surface, list], true);
  if (!isSeq(node)) return 0;
  const before = node.items.length;
  node.items = node.items.filter((i) => !((i as { value?: unknown }).value === entry || i === entry));
  return before - node.items.length;
}

/** The entries of `surface.list` as written (strings only), for a suggestion in a refusal. */
export function entriesOf(doc: Document, surface: Surface, list: 'allow' | 'deny'): string[] {
  const node = doc.getIn([surface, list], true);
  if (!isSeq(node)) return [];
  return node.items.flatMap((i) => {
    const v = (i as { value?: unknown }).value ?? i;
    return typeof v === 'string' ? [v] : [];
  });
}

export function setMode(doc: Document, surface: Surface, mode: Mode): boolean {
  if (doc.getIn([surface, 'mode']) === mode) return false;
  doc.setIn([surface, 'mode'], mode);
  return true;
}

export function setUser(doc: Document, user: string): boolean {
  if (doc.get('user') === user) return false;
  doc.set('user', user);
  return true;
}

/** The refusal for one entry, before any file is touched (engine grammar). */
export function checkEntry(surface: Surface, list: 'allow' | 'deny', entry: string): void {
  const problem = entryProblem(surface, entry);
  if (problem) {
    throw new LeashError('entry_inert', `${surface} ${list} entry ${JSON.stringify(entry)}: ${problem.message}`, {
      kind: 'entry',
      inert_entries: [{ surface, list, entry, problem, severity: list === 'deny' ? 'critical' : 'warning' }],
    });
  }
}
