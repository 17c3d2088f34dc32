import {
  ALL_TABLES,
  isApplied,
  key,
  renderApply,
  renderRelease,
  renderSubject,
  type RenderedSubject,
  type SubjectRules,
} from './render.js';
import { nftError, readState } from './read.js';
import type { Runner } from './run.js';

/** Applying and releasing subjects: one read of the state, one `nft -f` transaction. */

async function nftApply(runner: Runner, script: string): Promise<void> {
  const res = await runner(['nft', '-f', '-'], script);
  if (res.code !== 0) throw nftError('nft -f failed', res.stderr);
}

export type ApplyOutcome = 'added' | 'changed' | 'unchanged';

/** Up to this many subjects at once, the state is read for them alone; more (a start) read the tables whole. */
const SCOPED_READ_MAX = 64;

/**
 * Renders each subject, reads the tables once and applies every subject whose chains differ in one
 * `nft -f` transaction. A subject that cannot be rendered gets its error; a refused transaction throws.
 */
async function applyTogether(runner: Runner, list: SubjectRules[]): Promise<Map<number, ApplyOutcome | Error>> {
  const out = new Map<number, ApplyOutcome | Error>();
  const rendered: RenderedSubject[] = [];
  for (const s of list) {
    try {
      rendered.push(renderSubject(s));
    } catch (e) {
      out.set(s.uid, e as Error); // e.g. a resolver that is not an IP: this subject alone
    }
  }
  if (rendered.length === 0) return out;
  const state = await readState(runner, rendered.length <= SCOPED_READ_MAX ? rendered.map((r) => r.uid) : undefined);
  const todo: RenderedSubject[] = [];
  const changed = new Map<number, ApplyOutcome>();
  for (const r of rendered) {
    if (isApplied(state, r)) {
      out.set(r.uid, 'unchanged');
      continue;
    }
    const existed = [...state.values()].some((st) => st.chains.has(r.chain) || st.elements.has(r.uid));
    todo.push(r);
    changed.set(r.uid, existed ? 'changed' : 'added');
  }
  if (todo.length) await nftApply(runner, renderApply(state, todo));
  for (const [uid, o] of changed) out.set(uid, o);
  return out;
}

/** Applies one subject atomically. An unchanged subject is not touched at all. */
export async function applySubject(runner: Runner, s: SubjectRules): Promise<ApplyOutcome> {
  const r = (await applyTogether(runner, [s])).get(s.uid)!;
  if (r instanceof Error) throw r;
  return r;
}

/**
 * Applies many subjects with one read of the tables and one `nft -f` transaction (a service start
 * with hundreds of subjects would otherwise pay two nft runs per subject). When that fails, each subject is
 * applied on its own, so one that cannot be applied fails alone. Returns each subject's outcome, or the error of
 * one that failed.
 */
export async function applySubjects(runner: Runner, list: SubjectRules[]): Promise<Map<number, ApplyOutcome | Error>> {
  try {
    return await applyTogether(runner, list);
  } catch {
    return applyEach(list, (s) => applySubject(runner, s));
  }
}

/** Applies each subject on its own: one that fails is its error in the map, the others still applied. */
export async function applyEach(
  list: SubjectRules[],
  apply: (s: SubjectRules) => Promise<ApplyOutcome>,
): Promise<Map<number, ApplyOutcome | Error>> {
  const out = new Map<number, ApplyOutcome | Error>();
  for (const s of list) {
    try {
      out.set(s.uid, await apply(s));
    } catch (e) {
      out.set(s.uid, e as Error);
    }
  }
  return out;
}

/** Releases the given subjects (their chains and map elements); drops the tables when none remain. */
export async function releaseSubjects(runner: Runner, uids: number[]): Promise<void> {
  const state = await readState(runner, uids.length <= SCOPED_READ_MAX ? uids : undefined);
  const script = renderRelease(state, uids);
  if (script) await nftApply(runner, script);
}

/**
 * Drops any leash table still in an older shape: rules straight in the hooked chain (redirects, or one
 * `meta skuid <uid> jump agent_<uid>` rule per subject from before the dispatch map). A stale redirect there is a
 * terminal verdict that wins over the map, freezing that UID on its old policy. Called once at startup, before
 * the first subject is applied. Returns the tables dropped.
 */
export async function dropLegacyShape(runner: Runner, warn: (msg: string) => void): Promise<string[]> {
  const state = await readState(runner, []);
  const dropped: string[] = [];
  for (const t of ALL_TABLES) {
    const st = state.get(key(t));
    if (st?.exists && st.foreign.length > 0) dropped.push(`${t.family} ${t.table}`);
  }
  if (dropped.length) {
    await nftApply(runner, dropped.map((p) => `delete table ${p}`).join('\n') + '\n');
    warn(`leash: dropped nftables table(s) in the old shape: ${dropped.join(', ')}`);
  }
  return dropped;
}

/** True when `nft` can be run through this runner. */
export async function nftAvailable(runner: Runner): Promise<boolean> {
  const res = await runner(['nft', '--version']);
  return res.code === 0;
}
