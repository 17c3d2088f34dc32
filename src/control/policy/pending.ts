/**
 * The commit record of `leash apply` (`<state>/apply.pending.json`): the whole target state (every
 * profile's text and the bindings file's text) written atomically in one file before any profile or
 * bindings file is touched. Its rename is the commit point: while it exists, every reader of the
 * policy state (the service's reconcile, `leash check`, `leash status`) reads the target from it, and
 * every writer first rolls it forward (writes the files it names, removes the profiles it does not,
 * then removes the record). So a reader sees the state before or the state after, never a mix, and a
 * crash between the commit and the last file write is finished by the next writer.
 */
import fs from 'node:fs';
import path from 'node:path';
import { LeashError } from '../../errors.js';
import { atomicWriteFileSync, withFileLock } from '../../store/files.js';
import { bindingsFile, parseBindingsText, type BindingsDoc } from './bindings.js';
import type { ProfileStatus } from './profiles.js';
import {
  hashText,
  listProfiles,
  parseProfileText,
  profilePath,
  removeProfileFile,
  writeProfileText,
} from './profiles.js';

export interface PendingApply {
  version: 1;
  /** Every profile of the target, name -> text (a profile on disk not named here is removed). */
  profiles: Record<string, string>;
  /** The target bindings.yaml, as written. */
  bindings: string;
}

export function pendingFile(stateDir: string): string {
  return path.join(stateDir, 'apply.pending.json');
}

/** The commit record, or null when there is none. A record that cannot be read is `bindings_corrupt`. */
export function readPending(stateDir: string): PendingApply | null {
  const file = pendingFile(stateDir);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new LeashError('bindings_corrupt', `${file} is unreadable: ${(e as Error).message}`, { file });
  }
  try {
    const p = JSON.parse(text) as PendingApply;
    if (p.version !== 1 || typeof p.bindings !== 'string' || typeof p.profiles !== 'object' || p.profiles === null)
      throw new Error('not a commit record');
    return p;
  } catch (e) {
    throw new LeashError('bindings_corrupt', `${file} is corrupt: ${(e as Error).message}`, { file });
  }
}

/** The state a commit record holds, as the resolver reads it. */
export function pendingState(
  stateDir: string,
  p: PendingApply,
): { bindings: BindingsDoc; profile: (n: string) => ProfileStatus } {
  const file = pendingFile(stateDir);
  return {
    bindings: parseBindingsText(p.bindings, file),
    profile: (name) => {
      const text = p.profiles[name];
      if (text === undefined) return { status: 'missing', name };
      try {
        return { status: 'ok', name, fragment: parseProfileText(text, `${file}#${name}`), hash: hashText(text), text };
      } catch (e) {
        return { status: 'broken', name, message: (e as Error).message };
      }
    },
  };
}

/** Makes the commit record durable: from here on the target is the state. */
export function commitPending(stateDir: string, p: PendingApply): void {
  fs.mkdirSync(stateDir, { recursive: true, mode: 0o750 });
  atomicWriteFileSync(pendingFile(stateDir), JSON.stringify(p));
}

/** Writes what a commit record names into the files, then removes the record. Under the writer lock. */
export function rollForward(stateDir: string, p: PendingApply): void {
  for (const [name, text] of Object.entries(p.profiles)) {
    let old: string | null = null;
    try {
      old = fs.readFileSync(profilePath(stateDir, name), 'utf8');
    } catch {
      old = null;
    }
    if (old !== text) writeProfileText(stateDir, name, text);
  }
  for (const name of listProfiles(stateDir)) if (!(name in p.profiles)) removeProfileFile(stateDir, name);
  let oldBindings: string | null = null;
  try {
    oldBindings = fs.readFileSync(bindingsFile(stateDir), 'utf8');
  } catch {
    oldBindings = null;
  }
  if (oldBindings !== p.bindings) atomicWriteFileSync(bindingsFile(stateDir), p.bindings);
  fs.rmSync(pendingFile(stateDir));
  const fd = fs.openSync(stateDir, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** Finishes an interrupted apply, if any (call with the writer lock held). */
export function finishPending(stateDir: string): void {
  const p = readPending(stateDir);
  if (p) rollForward(stateDir, p);
}

/** The one writer lock for bindings and profiles, with an interrupted apply finished first. */
export function withWriterLock<T>(stateDir: string, fn: () => Promise<T> | T): Promise<T> {
  return withFileLock(bindingsFile(stateDir), () => {
    finishPending(stateDir);
    return fn();
  });
}
