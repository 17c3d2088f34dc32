import fs from 'node:fs';
import { isSeq, parseDocument, type Document } from 'yaml';
import { LeashError } from '../../errors.js';
import type { Mode, Surface } from '../../engine/types.js';
import { entryProblem, type InertEntry } from '../../engine/index.js';
import { lookupAccount, type Account } from './accounts.js';
import { lookalikeEntries, type Lookalike } from './lookalike.js';
import { readPolicyFile } from '../../formats/yaml.js';
import { atomicWrite, CONFIG_MODE, withLock } from '../../store/files.js';
import { parseConfig, type LoadedConfig } from './load.js';

export { atomicWrite, CONFIG_MODE, withLock };

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

/** The owner of the policy file: root, with the leashed user's primary group (root when unset). */
export function policyOwner(user: string | null, lookup: (n: string) => Account | null = lookupAccount) {
  const acct = user ? lookup(user) : null;
  return { uid: 0, gid: acct ? acct.gid : 0 };
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
