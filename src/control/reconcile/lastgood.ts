/**
 * The last known good state (issue 40): what the service last put in force, saved after each pass so that the next
 * start confines every subject from it before it reads a single profile, then corrects from the real files. It is
 * an Observation (plan.ts) as the pass saw it: each subject with its port and resolved policy, so the start plans
 * and applies it with the same code as any pass, and the correcting pass touches only what differs.
 *
 * Only root reads or writes it: the file is 0600 in a 0700 directory of the state directory, both root's. A file
 * that is not (a symlink, another owner, group or other access), that does not parse, or whose version is not this
 * one is ignored with a line naming why: the start is then as it was without one. What it allows lasts only until
 * the correcting pass, which follows at once.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Observation, Observed } from './plan.js';

export const LAST_GOOD_VERSION = 1;
const DIR = 'last-good';
const FILE = 'state.json';

type OkObservation = Extract<Observation, { ok: true }>;

export function lastGoodPath(stateDir: string): string {
  return path.join(stateDir, DIR, FILE);
}

/** Writes `obs` atomically (temp file, fsync, rename, fsync of the directory), 0600 in a 0700 directory. */
export function saveLastGood(stateDir: string, obs: OkObservation): void {
  const dir = path.join(stateDir, DIR);
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  fs.chmodSync(dir, 0o700);
  const body = JSON.stringify({
    version: LAST_GOOD_VERSION,
    written: new Date().toISOString(),
    mode: obs.mode,
    subjects: obs.subjects,
  });
  const tmp = path.join(dir, `.${FILE}.${process.pid}.${crypto.randomBytes(4).toString('hex')}.tmp`);
  const fd = fs.openSync(tmp, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o600);
  try {
    fs.writeFileSync(fd, body);
    fs.fsyncSync(fd);
  } catch (e) {
    fs.closeSync(fd);
    fs.rmSync(tmp, { force: true });
    throw e;
  }
  fs.closeSync(fd);
  fs.renameSync(tmp, path.join(dir, FILE));
  const dfd = fs.openSync(dir, 'r');
  try {
    fs.fsyncSync(dfd);
  } finally {
    fs.closeSync(dfd);
  }
}

export type LastGood = { ok: true; observation: OkObservation; written: string } | { ok: false; why: string } | null;

/** Root's only: owned by this process's user, no group or other access, a regular file or directory. */
function privateTo(st: fs.Stats, dir: boolean): string | null {
  const me = process.getuid?.() ?? 0;
  if (dir ? !st.isDirectory() : !st.isFile()) return dir ? 'not a directory' : 'not a regular file';
  if (st.uid !== me) return `owned by uid ${st.uid}`;
  if ((st.mode & 0o077) !== 0) return `mode ${(st.mode & 0o777).toString(8)} (group or others have access)`;
  return null;
}

function validObserved(o: unknown): o is Observed {
  const x = o as Observed;
  const s = x?.subject;
  if (!s || typeof s.account !== 'string' || !Number.isInteger(s.uid) || (s.kind !== 'agent' && s.kind !== 'user'))
    return false;
  if (x.port !== null && !Number.isInteger(x.port)) return false;
  const r = x.resolution;
  if (!r || typeof r !== 'object') return false;
  if (r.ok === true) return typeof r.hash === 'string' && typeof r.policy === 'object' && r.policy !== null;
  return r.ok === false && typeof r.failure?.code === 'string';
}

/**
 * Reads the saved state. null: there is none (a first start). `ok: false` with why: there is one and it is not to
 * be trusted or read (the caller logs it and starts as without).
 */
export function readLastGood(stateDir: string): LastGood {
  const dir = path.join(stateDir, DIR);
  const file = path.join(dir, FILE);
  let text: string;
  try {
    const why = privateTo(fs.lstatSync(dir), true);
    if (why) return { ok: false, why: `${dir}: ${why}` };
    const fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
    try {
      const fwhy = privateTo(fs.fstatSync(fd), false);
      if (fwhy) return { ok: false, why: `${file}: ${fwhy}` };
      text = fs.readFileSync(fd, 'utf8');
    } finally {
      fs.closeSync(fd);
    }
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return null;
    return { ok: false, why: `${file}: ${code ?? (e as Error).message}` };
  }
  let doc: { version?: unknown; written?: unknown; mode?: unknown; subjects?: unknown };
  try {
    doc = JSON.parse(text) as typeof doc;
  } catch (e) {
    return { ok: false, why: `${file}: not JSON (${(e as Error).message})` };
  }
  if (doc.version !== LAST_GOOD_VERSION)
    return {
      ok: false,
      why: `${file}: version ${String(doc.version)}, this Leash reads version ${LAST_GOOD_VERSION} (written by ${
        typeof doc.version === 'number' && doc.version > LAST_GOOD_VERSION ? 'a newer' : 'an older or another'
      } Leash)`,
    };
  if ((doc.mode !== 'single' && doc.mode !== 'multi') || !Array.isArray(doc.subjects))
    return { ok: false, why: `${file}: no mode or subjects` };
  const bad = doc.subjects.findIndex((o) => !validObserved(o));
  if (bad >= 0) return { ok: false, why: `${file}: subject ${bad} is not one` };
  return {
    ok: true,
    written: typeof doc.written === 'string' ? doc.written : '',
    observation: { ok: true, mode: doc.mode, subjects: doc.subjects as Observed[], warnings: [] },
  };
}
