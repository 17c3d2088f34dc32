/**
 * A `persist` decision: an allow entry naming exactly what was asked, written into the subject's
 * agent profile through the same consent rules as `leash profile save` / `leash bind`. The approval
 * is the acknowledgement: its token (`<surface>.allow:<entry>`) is recorded on the agent's binding.
 * An agent with no binding gets a profile of its own (`approved-<account>`) bound to it. Refused
 * (the request stays pending): the configured user (no agent tier; its policy is the floor file), a
 * blacklist surface (an allow entry is never consulted there), a profile shared with agents that did
 * not consent.
 */
import YAML from 'yaml';
import type { Surface } from '../../engine/types.js';
import { LeashError } from '../../errors.js';
import { readBindings } from '../policy/bindings.js';
import { bind, saveProfile } from '../policy/commands.js';
import type { StoreContext } from '../policy/consent.js';
import { listProfiles, loadProfile, profileLoader } from '../policy/profiles.js';
import { foldedBase, resolveSubject } from '../policy/resolve.js';
import type { PendingView } from './queue.js';

function refuse(message: string): never {
  throw new LeashError('approval_persist_failed', message);
}

/** The profile name for an agent without one: `approved-<account>` in the profile-name grammar. */
export function approvedProfileName(account: string, taken: (n: string) => boolean): string {
  const base = `approved-${account.toLowerCase().replace(/[^a-z0-9._-]/g, '-')}`;
  if (!taken(base)) return base;
  for (let i = 2; ; i++) if (!taken(`${base}-${i}`)) return `${base}-${i}`;
}

/** Writes the allow entry of `req` for its subject; `context` is read now (the floor, passwd, bindings). */
export async function persistApproval(
  ctx: StoreContext,
  req: PendingView,
): Promise<{ profile: string; token: string }> {
  const entry = req.persist;
  if (entry === null) refuse('this request names nothing an allow entry can hold');
  const surface: Surface = req.surface;
  const subject = ctx.discovery.subjects.find((s) => s.uid === req.uid);
  if (!subject) refuse(`uid ${req.uid} is no longer a subject`);
  if (subject.kind !== 'agent')
    refuse(`${subject.account} is the configured user: its policy is the floor file, which an approval does not edit`);
  const token = `${surface}.allow:${entry}`;
  const bindings = readBindings(ctx.stateDir);
  const state = { floor: ctx.floor, bindings, profile: profileLoader(ctx.stateDir) };
  const resolved = resolveSubject(subject, state);
  if (!resolved.ok) refuse(`${subject.account} has no resolved policy (${resolved.failure.code})`);
  if (resolved.policy[surface].mode !== 'whitelist')
    refuse(`${surface} is in blacklist mode for ${subject.account}: an allow entry is never consulted there`);
  if (resolved.policy[surface].allow.includes(entry)) return { profile: '', token };
  const scope = `agent:${subject.account}` as const;
  const b = bindings.bindings[scope];
  const source = `approval ${req.id}`;
  if (b) {
    const st = loadProfile(ctx.stateDir, b.profile);
    if (st.status !== 'ok') refuse(`profile ${b.profile} of ${subject.account} is not readable (${st.status})`);
    // A fragment's list replaces the base's: when the profile sets none, it starts from what applies now.
    const own = st.fragment[surface]?.allow;
    const fb = foldedBase(state);
    const start = own ?? (fb.ok ? fb.policy[surface].allow : []);
    const doc = YAML.parseDocument(st.text);
    doc.setIn([surface, 'allow'], [...start, entry]);
    await saveProfile(ctx, b.profile, doc.toString(), source, [`agent:${subject.account}=${token}`]);
    return { profile: b.profile, token };
  }
  const fb = foldedBase(state);
  const taken = new Set(listProfiles(ctx.stateDir));
  const name = approvedProfileName(subject.account, (n) => taken.has(n));
  const text = `# written by leash for approval ${req.id} (persist)\n${YAML.stringify({
    [surface]: { allow: [...(fb.ok ? fb.policy[surface].allow : []), entry] },
  })}`;
  await saveProfile(ctx, name, text, source, []);
  await bind(ctx, scope, name, [token]);
  return { profile: name, token };
}
