import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { PolicyError } from './errors.js';
import type { Fragment } from './fragment.js';
import { validateFragment } from './fragment.js';
import { atomicWriteFileSync } from './fsutil.js';

/** Lowercase, starts alphanumeric: a profile name is also a file name, so no `/`, no leading dot. */
export const PROFILE_NAME = /^[a-z0-9][a-z0-9._-]*$/;

export function checkProfileName(name: string): void {
  if (!PROFILE_NAME.test(name) || name.length > 64 || name.includes('..')) {
    throw new PolicyError(
      'profile_name_invalid',
      `profile name ${JSON.stringify(name)} must match [a-z0-9][a-z0-9._-]* (at most 64)`,
      {
        name,
      },
    );
  }
}

export function profilesDir(stateDir: string): string {
  return path.join(stateDir, 'profiles');
}

export function profilePath(stateDir: string, name: string): string {
  checkProfileName(name);
  return path.join(profilesDir(stateDir), `${name}.yaml`);
}

export function hashText(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** What the resolver sees of a profile: present and valid, gone (dangling), or unreadable/invalid. */
export type ProfileStatus =
  | { status: 'ok'; name: string; fragment: Fragment; hash: string; text: string }
  | { status: 'missing'; name: string }
  | { status: 'broken'; name: string; message: string };

/** Parses profile text as a fragment; `profile_invalid` lists every `path: message`. */
export function parseProfileText(text: string, source: string): Fragment {
  let doc: unknown;
  try {
    doc = YAML.parse(text, { uniqueKeys: true });
  } catch (e) {
    throw new PolicyError('profile_invalid', `${source}: not YAML: ${(e as Error).message}`, { source });
  }
  const v = validateFragment(doc);
  if (!v.ok) {
    throw new PolicyError(
      'profile_invalid',
      `${source} is not a valid profile fragment:\n${v.issues.map((i) => `  ${i.path}: ${i.message}`).join('\n')}`,
      {
        source,
        issues: v.issues,
      },
    );
  }
  return v.fragment;
}

export function loadProfile(stateDir: string, name: string): ProfileStatus {
  const file = profilePath(stateDir, name);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { status: 'missing', name };
    return { status: 'broken', name, message: `cannot read ${file}: ${(e as Error).message}` };
  }
  try {
    return { status: 'ok', name, fragment: parseProfileText(text, file), hash: hashText(text), text };
  } catch (e) {
    return { status: 'broken', name, message: (e as Error).message };
  }
}

/** A loader that reads each profile once per pass (a reconcile asks for the same one per subject). */
export function profileLoader(stateDir: string): (name: string) => ProfileStatus {
  const cache = new Map<string, ProfileStatus>();
  return (name) => {
    let s = cache.get(name);
    if (!s) {
      try {
        s = loadProfile(stateDir, name);
      } catch (e) {
        s = { status: 'broken', name, message: (e as Error).message };
      }
      cache.set(name, s);
    }
    return s;
  };
}

/** Profile names on disk (dot-files are a writer's temp files, never profiles). */
export function listProfiles(stateDir: string): string[] {
  let names: string[];
  try {
    names = fs.readdirSync(profilesDir(stateDir));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw e;
  }
  return names
    .filter((n) => n.endsWith('.yaml') && !n.startsWith('.'))
    .map((n) => n.slice(0, -'.yaml'.length))
    .filter((n) => PROFILE_NAME.test(n))
    .sort();
}

export function writeProfileText(stateDir: string, name: string, text: string): void {
  fs.mkdirSync(profilesDir(stateDir), { recursive: true, mode: 0o750 });
  atomicWriteFileSync(profilePath(stateDir, name), text, 0o640);
}

export function removeProfileFile(stateDir: string, name: string): void {
  fs.rmSync(profilePath(stateDir, name));
}
