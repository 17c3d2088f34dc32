/**
 * Consent: what a change to the bindings or a profile loosens for which subject, judged exactly as
 * run start resolves them, and the refusals (`loosening_unacknowledged`, `policy_unjudgeable`,
 * `ack_invalid`) that name each finding's ack token. Pure over the state it is given; the commands
 * (commands.ts) call it before and again under the writer lock.
 */
import { LeashError } from '../../errors.js';
import type { Discovery, Subject } from '../subjects/discovery.js';
import type { BindingsDoc, Scope } from './bindings.js';
import { bindingFragment } from './bindings.js';
import type { Effective, Fragment } from './fragment.js';
import type { Loosening } from './loosen.js';
import { judgeOverlay, loosenings, mergeFindings, parseToken } from './loosen.js';
import type { ProfileStatus } from './profiles.js';
import { profileLoader } from './profiles.js';
import type { PolicyState, SubjectFailure } from './resolve.js';
import { foldedBase, resolveSubject } from './resolve.js';

/** Everything an operation needs that is read outside the lock. */
export interface StoreContext {
  stateDir: string;
  floor: Effective;
  discovery: Discovery;
  configuredUser: string | null;
}

export function affectedSubjects(scope: Scope, d: Discovery): Subject[] {
  if (scope === 'global') return d.subjects;
  return d.subjects.filter((s) => s.kind === 'agent' && `agent:${s.account}` === scope);
}

/** The loosenings a binding of `fragment` at `scope` performs: global against the unfolded floor; an agent against the floor file and the folded base both. */
export function bindingFindings(scope: Scope, fragment: Fragment, state: PolicyState): Loosening[] {
  const vsFloor = judgeOverlay(state.floor, fragment);
  if (scope === 'global') return vsFloor;
  const fb = foldedBase(state);
  return mergeFindings(vsFloor, fb.ok ? judgeOverlay(fb.policy, fragment) : []);
}

export interface Transition {
  findings: Loosening[];
  /** Subjects Leash cannot judge (unresolvable after the change): the change is refused. */
  unjudgeable: { account: string; failure: SubjectFailure }[];
}

/**
 * Resolves each subject before and after a change to `scope`, exactly as run start would, and
 * asks the loosening rules of the difference. A subject held fail-closed before and resolvable
 * after is returned to a policy: `fail_closed:<profile>`.
 */
export function judgeTransition(
  before: PolicyState,
  after: PolicyState,
  subjects: Subject[],
  scope: Scope,
): Transition {
  const lists: Loosening[][] = [];
  const unjudgeable: Transition['unjudgeable'] = [];
  for (const s of subjects) {
    const rb = resolveSubject(s, before);
    const ra = resolveSubject(s, after);
    if (!ra.ok) {
      if (ra.failure.scope === scope && ra.failure.code === 'unacknowledged_loosening') {
        lists.push(ra.failure.missing ?? []);
      } else if (ra.failure.scope !== scope && ra.failure.scope !== 'global') {
        // A global change leaves this subject held fail-closed by its own binding: a tightening for it,
        // and whatever fixes that binding later (bind, profile save) is judged then.
      } else {
        // Still unresolvable without (or with) the change at this tier: Leash cannot judge it.
        unjudgeable.push({ account: s.account, failure: ra.failure });
      }
      continue;
    }
    if (!rb.ok) {
      const p = rb.failure.profile;
      lists.push([
        {
          field: 'fail_closed',
          value: p,
          token: `fail_closed:${p}`,
          words: `${s.account} leaves fail-closed (${rb.failure.code}, profile ${p}): denied everything -> a resolved policy`,
        },
      ]);
      continue;
    }
    lists.push(loosenings(rb.policy, ra.policy));
  }
  return { findings: mergeFindings(...lists), unjudgeable };
}

export function unjudgeableError(what: string, u: Transition['unjudgeable']): LeashError {
  return new LeashError(
    'policy_unjudgeable',
    `${what} cannot be judged, so it is refused: ${u.map((x) => `${x.account}: ${x.failure.message}`).join('; ')}`,
    { subjects: u.map((x) => ({ account: x.account, code: x.failure.code, scope: x.failure.scope })) },
  );
}

/** The refusal: every finding (not the first), each with its exact ack token. */
export function refuse(
  what: string,
  findings: Loosening[],
  missing: string[],
  extra: Record<string, unknown> = {},
): LeashError {
  return new LeashError(
    'loosening_unacknowledged',
    `${what} loosens what a subject may do and needs consent for each finding`,
    {
      findings: findings.map((f) => ({ token: f.token, words: f.words })),
      missing,
      ...extra,
    },
  );
}

export function withFloorState(
  ctx: StoreContext,
  bindings: BindingsDoc,
  profile = profileLoader(ctx.stateDir),
): PolicyState {
  return { floor: ctx.floor, bindings, profile };
}

export function override(
  base: (n: string) => ProfileStatus,
  name: string,
  st: ProfileStatus,
): (n: string) => ProfileStatus {
  return (n) => (n === name ? st : base(n));
}

/** Resolution failures after a write: said out loud by the CLI, they are what reconcile will deny. */
export interface Impact {
  account: string;
  failure: SubjectFailure;
}
export function impactOf(state: PolicyState, d: Discovery): Impact[] {
  const out: Impact[] = [];
  for (const s of d.subjects) {
    const r = resolveSubject(s, state);
    if (!r.ok) out.push({ account: s.account, failure: r.failure });
  }
  return out;
}

export interface BindJudgement {
  hash: string;
  base: Loosening[];
  required: Loosening[];
  changeOnly: Loosening[];
}

export function judgeBind(
  ctx: StoreContext,
  bindings: BindingsDoc,
  scope: Scope,
  name: string,
  st: ProfileStatus,
  enforce?: 'enforce' | 'shadow',
): BindJudgement {
  if (st.status === 'missing')
    throw new LeashError('profile_not_found', `no profile ${name} (leash profile save ${name} --from FILE)`, {
      profile: name,
    });
  if (st.status === 'broken') throw new LeashError('profile_invalid', st.message, { profile: name });
  const loader = override(profileLoader(ctx.stateDir), name, st);
  const before = withFloorState(ctx, bindings, loader);
  const binding = { profile: name, acks: [] as string[], ...(enforce !== undefined ? { enforce } : {}) };
  const base = bindingFindings(scope, bindingFragment(binding, st.fragment), before);
  const afterDoc: BindingsDoc = {
    version: 1,
    bindings: { ...bindings.bindings, [scope]: { ...binding, acks: base.map((f) => f.token) } },
  };
  const t = judgeTransition(
    before,
    withFloorState(ctx, afterDoc, loader),
    affectedSubjects(scope, ctx.discovery),
    scope,
  );
  if (t.unjudgeable.length) throw unjudgeableError(`bind ${scope} ${name}`, t.unjudgeable);
  const required = mergeFindings(base, t.findings);
  const baseTokens = new Set(base.map((f) => f.token));
  return { hash: st.hash, base, required, changeOnly: t.findings.filter((f) => !baseTokens.has(f.token)) };
}

export function checkAckTokens(acks: string[]): void {
  const bad = acks.filter((a) => !parseToken(a));
  if (bad.length) throw new LeashError('ack_invalid', `an ack is field:value: ${bad.join(', ')}`, { acks: bad });
}
