import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { parseFragment } from '../config/load.js';
import { readPolicyFile } from '../../formats/yaml.js';
import { LeashError } from '../../errors.js';
import type { Fragment } from './fragment.js';
import { atomicWriteFileSync } from '../../store/files.js';

/** Lowercase, starts alphanumeric: a profile name is also a file name, so no `/`, no leading dot. */
export const PROFILE_NAME = /^[a-z0-9][a-z0-9._-]*$/;

export function checkProfileName(name: string): void {
  if (!PROFILE_NAME.test(name) || name.length > 64 || name.includes('..')) {
    throw new LeashError(
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

/**
 * Parses profile text with the config's own fragment schema. A profile may not set `user` (whose
 * account is confined), `logging` (where decisions go) or `host` (the host's own settings): those are not policy. A fail_mode typo,
 * which the floor reads as closed with a warning, is refused here: a profile is written by a
 * command that can say no.
 */
export function parseProfileText(text: string, source: string): Fragment {
  let parsed: ReturnType<typeof parseFragment>;
  try {
    parsed = parseFragment(text, source);
  } catch (e) {
    if (e instanceof LeashError) {
      throw new LeashError(
        'profile_invalid',
        `${source} is not a valid profile fragment (${e.code})`,
        { source, cause: e.code, issues: e.details?.issues ?? [] },
        { cause: e },
      );
    }
    throw e;
  }
  const issues: { path: string; message: string }[] = [];
  for (const k of ['user', 'logging', 'host', 'approvals', 'console'] as const) {
    if (parsed.fragment[k] !== undefined)
      issues.push({ path: k, message: 'not policy: a profile sets only fail_mode, the four surfaces and enforcers' });
  }
  for (const f of parsed.findings)
    if (f.code === 'fail_mode_invalid' || f.code === 'entry_lookalike')
      issues.push({ path: f.path, message: f.message });
  if (issues.length)
    throw new LeashError('profile_invalid', `${source} is not a valid profile fragment`, { source, issues });
  const { user: _u, logging: _l, host: _h, approvals: _a, console: _c, ...fragment } = parsed.fragment;
  return fragment;
}

/**
 * What a long-lived reader (the service's reconcile) keeps between reads: each file's text and what it parsed
 * to. A file whose text is the same as last time is not parsed again (parsing 1,000 profiles was most of a pass
 * at 1,000 subjects); the text is always read, so a changed file is always seen.
 */
export type ParseCache = Pick<Map<string, { text: string; status: ProfileStatus }>, 'get' | 'set'>;

export function loadProfile(stateDir: string, name: string, parsed?: ParseCache): ProfileStatus {
  const file = profilePath(stateDir, name);
  let text: string;
  try {
    // The strict reader: bounded, UTF-8 or refused (never U+FFFD).
    text = readPolicyFile(file);
  } catch (e) {
    if (e instanceof LeashError && e.code === 'config_missing') return { status: 'missing', name };
    return {
      status: 'broken',
      name,
      message: `${(e as Error).message}${e instanceof LeashError ? ` [${e.code}]` : ''}`,
    };
  }
  const known = parsed?.get(file);
  if (known && known.text === text) {
    parsed!.set(file, known); // still in use: kept for the next read
    return known.status;
  }
  let status: ProfileStatus;
  try {
    status = { status: 'ok', name, fragment: parseProfileText(text, file), hash: hashText(text), text };
  } catch (e) {
    status = { status: 'broken', name, message: (e as Error).message };
  }
  parsed?.set(file, { text, status });
  return status;
}

/** A loader that reads each profile once per pass (a reconcile asks for the same one per subject). */
export function profileLoader(stateDir: string, parsed?: ParseCache): (name: string) => ProfileStatus {
  const cache = new Map<string, ProfileStatus>();
  return (name) => {
    let s = cache.get(name);
    if (!s) {
      try {
        s = loadProfile(stateDir, name, parsed);
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
  atomicWriteFileSync(profilePath(stateDir, name), text);
}

export function removeProfileFile(stateDir: string, name: string): void {
  fs.rmSync(profilePath(stateDir, name));
}
