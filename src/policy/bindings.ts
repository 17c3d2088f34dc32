import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { parseStrictYaml } from '../config/strict-yaml.js';
import type { Discovery, PasswdEntry, Subject } from '../subjects/discovery.js';
import { AGENT_PREFIX } from '../subjects/discovery.js';
import { PolicyError } from './errors.js';
import type { Effective, Fragment } from './fragment.js';
import { appendLineDurable, atomicWriteFileSync, testPause, withFileLock } from '../store/files.js';
import { inertInFragment } from './inert.js';
import type { Loosening } from './loosen.js';
import { judgeOverlay, loosenings, mergeFindings, parseAgentAck, parseToken } from './loosen.js';
import type { ProfileStatus } from './profiles.js';
import {
  checkProfileName,
  hashText,
  loadProfile,
  parseProfileText,
  profileLoader,
  removeProfileFile,
  writeProfileText,
} from './profiles.js';
import type { PolicyState, SubjectFailure } from './resolve.js';
import { foldedBase, resolveSubject } from './resolve.js';

export type Scope = 'global' | `agent:${string}`;

/** One profile attached to one scope. Consent (acks) lives here, never in the profile. */
export interface Binding {
  profile: string;
  acks: string[];
}

export interface BindingsDoc {
  version: 1;
  bindings: Partial<Record<Scope, Binding>>;
}

export function bindingsFile(stateDir: string): string {
  return path.join(stateDir, 'bindings.yaml');
}
export function ledgerFile(stateDir: string): string {
  return path.join(stateDir, 'unbinds.jsonl');
}
/** The one writer lock for bindings and profiles together (the profile library has none of its own). */
export function writerLock(stateDir: string): string {
  return `${bindingsFile(stateDir)}.lock`;
}

function corrupt(file: string, why: string): PolicyError {
  return new PolicyError('bindings_corrupt', `${file} is corrupt: ${why}`, { file });
}

const SCOPE_RE = /^(global|agent:[a-z_][a-z0-9_.-]*\$?)$/;

/** Reads bindings.yaml; missing is empty, malformed is `bindings_corrupt` (never "no bindings"). */
export function readBindings(stateDir: string): BindingsDoc {
  const file = bindingsFile(stateDir);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { version: 1, bindings: {} };
    throw corrupt(file, (e as Error).message);
  }
  let doc: unknown;
  try {
    // The strict reader: no anchors, aliases, merge keys or tags; bounded sizes.
    doc = parseStrictYaml(text, file, { uniqueKeys: true }).js;
  } catch (e) {
    throw corrupt(file, (e as Error).message);
  }
  if (doc === null || doc === undefined) return { version: 1, bindings: {} };
  const b = (doc as { bindings?: unknown }).bindings ?? {};
  if (typeof b !== 'object' || b === null || Array.isArray(b)) throw corrupt(file, 'bindings is not a mapping');
  const out: BindingsDoc = { version: 1, bindings: {} };
  for (const [scope, v] of Object.entries(b as Record<string, unknown>)) {
    if (!SCOPE_RE.test(scope)) throw corrupt(file, `bad scope ${scope}`);
    const e = v as { profile?: unknown; acks?: unknown } | null;
    if (typeof e?.profile !== 'string') throw corrupt(file, `${scope}: no profile`);
    const acks = e.acks ?? [];
    if (!Array.isArray(acks) || acks.some((a) => typeof a !== 'string'))
      throw corrupt(file, `${scope}: acks is not a list of strings`);
    out.bindings[scope as Scope] = { profile: e.profile, acks: acks as string[] };
  }
  return out;
}

export function serializeBindings(doc: BindingsDoc): string {
  const sorted = Object.fromEntries(
    Object.entries(doc.bindings).sort(([a], [b]) => (a === 'global' ? -1 : b === 'global' ? 1 : a.localeCompare(b))),
  );
  return `# Written by leash bind/unbind/profile save. Edit with the CLI: acks are consent, judged on write.\n${YAML.stringify({ version: 1, bindings: sorted }, { aliasDuplicateObjects: false })}`;
}

export function writeBindings(stateDir: string, doc: BindingsDoc): void {
  fs.mkdirSync(stateDir, { recursive: true, mode: 0o750 });
  atomicWriteFileSync(bindingsFile(stateDir), serializeBindings(doc));
}

/**
 * Checks a scope against passwd. `agent:<account>` must name an existing `leash-*` account:
 * a display name (`agent:Iris`) would bind nobody, silently, so it is refused, naming the real
 * account when one matches (case-insensitively, by its gecos name, or as `leash-<name>`).
 */
export function parseScope(raw: string, accounts: PasswdEntry[], configuredUser: string | null): Scope {
  if (raw === 'global') return 'global';
  const m = /^agent:(.+)$/.exec(raw);
  if (!m)
    throw new PolicyError(
      'scope_invalid',
      `scope ${JSON.stringify(raw)} must be global or agent:<account> (team is not a scope)`,
      { scope: raw },
    );
  const name = m[1] ?? '';
  const exact = accounts.find((a) => a.name === name);
  if (exact && name.startsWith(AGENT_PREFIX) && name !== configuredUser) return `agent:${name}`;
  if (exact && name === configuredUser) {
    throw new PolicyError(
      'scope_invalid',
      `${name} is the configured user: it resolves to the floor and has no tier of its own`,
      { scope: raw, account: name },
    );
  }
  if (exact) {
    throw new PolicyError(
      'scope_invalid',
      `${name} is not an agent account (discovery confines only ${AGENT_PREFIX}* accounts)`,
      { scope: raw, account: name },
    );
  }
  const low = name.toLowerCase();
  const slug = low.replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '');
  const candidates = accounts.filter(
    (a) =>
      a.name.startsWith(AGENT_PREFIX) &&
      (a.name.toLowerCase() === low ||
        a.name.toLowerCase() === `${AGENT_PREFIX}${low}` ||
        a.name === `${AGENT_PREFIX}${slug}` ||
        (a.gecos.split(',')[0] ?? '').trim().toLowerCase() === low),
  );
  const hint = candidates.length ? `; did you mean ${candidates.map((c) => `agent:${c.name}`).join(' or ')}?` : '';
  throw new PolicyError(
    'scope_unknown_account',
    `no account ${JSON.stringify(name)} in passwd: a scope names the Linux account, never a display name${hint}`,
    { scope: raw, suggestions: candidates.map((c) => c.name) },
  );
}

/** Everything an operation needs that is read outside the lock. */
export interface StoreContext {
  stateDir: string;
  floor: Effective;
  discovery: Discovery;
  configuredUser: string | null;
}

function affectedSubjects(scope: Scope, d: Discovery): Subject[] {
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

function unjudgeableError(what: string, u: Transition['unjudgeable']): PolicyError {
  return new PolicyError(
    'policy_unjudgeable',
    `${what} cannot be judged, so it is refused: ${u.map((x) => `${x.account}: ${x.failure.message}`).join('; ')}`,
    { subjects: u.map((x) => ({ account: x.account, code: x.failure.code, scope: x.failure.scope })) },
  );
}

/** The refusal: every finding (not the first), each with its exact ack token. */
function refuse(
  what: string,
  findings: Loosening[],
  missing: string[],
  extra: Record<string, unknown> = {},
): PolicyError {
  return new PolicyError(
    'loosening_unacknowledged',
    `${what} loosens what a subject may do and needs consent for each finding`,
    {
      findings: findings.map((f) => ({ token: f.token, words: f.words })),
      missing,
      ...extra,
    },
  );
}

function withFloorState(ctx: StoreContext, bindings: BindingsDoc, profile = profileLoader(ctx.stateDir)): PolicyState {
  return { floor: ctx.floor, bindings, profile };
}

function override(base: (n: string) => ProfileStatus, name: string, st: ProfileStatus): (n: string) => ProfileStatus {
  return (n) => (n === name ? st : base(n));
}

/** Resolution failures after a write: said out loud by the CLI, they are what reconcile will deny. */
export interface Impact {
  account: string;
  failure: SubjectFailure;
}
function impactOf(state: PolicyState, d: Discovery): Impact[] {
  const out: Impact[] = [];
  for (const s of d.subjects) {
    const r = resolveSubject(s, state);
    if (!r.ok) out.push({ account: s.account, failure: r.failure });
  }
  return out;
}

function ledgerAppend(stateDir: string, rec: Record<string, unknown>): void {
  try {
    fs.mkdirSync(stateDir, { recursive: true, mode: 0o750 });
    appendLineDurable(
      ledgerFile(stateDir),
      JSON.stringify({ ts: new Date().toISOString(), by_uid: process.getuid?.() ?? null, ...rec }),
    );
  } catch (e) {
    throw new PolicyError(
      'ledger_unwritable',
      `cannot write ${ledgerFile(stateDir)} (${(e as Error).message}): nothing was removed`,
      {
        file: ledgerFile(stateDir),
      },
    );
  }
}

export interface BindResult {
  scope: Scope;
  profile: string;
  findings: Loosening[];
  acks: string[];
  replaced: string | null;
  impact: Impact[];
  ignoredAcks: string[];
}

interface BindJudgement {
  hash: string;
  base: Loosening[];
  required: Loosening[];
  changeOnly: Loosening[];
}

function judgeBind(
  ctx: StoreContext,
  bindings: BindingsDoc,
  scope: Scope,
  name: string,
  st: ProfileStatus,
): BindJudgement {
  if (st.status === 'missing')
    throw new PolicyError('profile_not_found', `no profile ${name} (leash profile save ${name} --from FILE)`, {
      profile: name,
    });
  if (st.status === 'broken') throw new PolicyError('profile_invalid', st.message, { profile: name });
  const loader = override(profileLoader(ctx.stateDir), name, st);
  const before = withFloorState(ctx, bindings, loader);
  const base = bindingFindings(scope, st.fragment, before);
  const afterDoc: BindingsDoc = {
    version: 1,
    bindings: { ...bindings.bindings, [scope]: { profile: name, acks: base.map((f) => f.token) } },
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

function checkAckTokens(acks: string[]): void {
  const bad = acks.filter((a) => !parseToken(a));
  if (bad.length) throw new PolicyError('ack_invalid', `an ack is field:value: ${bad.join(', ')}`, { acks: bad });
}

/**
 * `leash bind SCOPE PROFILE`: judged before the lock (fast refusal), then again under the one
 * writer lock against the bindings as they are then, after checking that the profile judged is
 * still the one on disk.
 */
export async function bind(ctx: StoreContext, scopeRaw: string, name: string, acks: string[]): Promise<BindResult> {
  checkProfileName(name);
  checkAckTokens(acks);
  const scope = parseScope(scopeRaw, ctx.discovery.accounts, ctx.configuredUser);
  // Consent already on this scope's binding of the same profile still counts (a re-bind is idempotent).
  const held = (bindings: BindingsDoc): string[] => {
    const old = bindings.bindings[scope];
    return old && old.profile === name ? old.acks : [];
  };
  const judge = (bindings: BindingsDoc, st: ProfileStatus): BindJudgement => {
    const j = judgeBind(ctx, bindings, scope, name, st);
    const have = [...acks, ...held(bindings)];
    const missing = j.required.filter((f) => !have.includes(f.token)).map((f) => f.token);
    if (missing.length) throw refuse(`bind ${scope} ${name}`, j.required, missing, { scope, profile: name });
    return j;
  };
  const pre = judge(readBindings(ctx.stateDir), loadProfile(ctx.stateDir, name));
  fs.mkdirSync(ctx.stateDir, { recursive: true, mode: 0o750 });
  return withFileLock(bindingsFile(ctx.stateDir), () => {
    const st = loadProfile(ctx.stateDir, name);
    if (st.status !== 'ok' || st.hash !== pre.hash) {
      throw new PolicyError(
        'profile_changed',
        `profile ${name} changed while it was being judged; run the command again`,
        { profile: name },
      );
    }
    const bindings = readBindings(ctx.stateDir);
    const j = judge(bindings, st);
    const old = bindings.bindings[scope];
    const keep = held(bindings);
    const baseTokens = j.base.map((f) => f.token);
    const stored = [...new Set([...keep, ...acks])].filter((a) => baseTokens.includes(a));
    if (old && j.changeOnly.length) {
      // Consent to what replacing the old binding drops cannot live on the new binding: ledger it.
      ledgerAppend(ctx.stateDir, {
        op: 'rebind',
        scope,
        profile: old.profile,
        new_profile: name,
        findings: j.changeOnly.map((f) => f.token),
        acks: j.changeOnly.map((f) => f.token),
      });
    }
    const next: BindingsDoc = {
      version: 1,
      bindings: { ...bindings.bindings, [scope]: { profile: name, acks: stored } },
    };
    writeBindings(ctx.stateDir, next);
    const requiredTokens = j.required.map((f) => f.token);
    return {
      scope,
      profile: name,
      findings: j.required,
      acks: stored,
      replaced: old ? old.profile : null,
      impact: impactOf(withFloorState(ctx, next), ctx.discovery),
      ignoredAcks: acks.filter((a) => !requiredTokens.includes(a)),
    };
  });
}

export interface UnbindResult {
  scope: Scope;
  profile: string;
  findings: Loosening[];
  impact: Impact[];
}

/**
 * `leash unbind SCOPE`: resolves each affected subject with and without the binding and judges
 * the difference like a bind. The acks go to the append-only ledger, fsynced before the binding
 * is removed: no record, no removal.
 */
export async function unbind(ctx: StoreContext, scopeRaw: string, acks: string[]): Promise<UnbindResult> {
  checkAckTokens(acks);
  fs.mkdirSync(ctx.stateDir, { recursive: true, mode: 0o750 });
  return withFileLock(bindingsFile(ctx.stateDir), () => {
    const bindings = readBindings(ctx.stateDir);
    const scope = (
      scopeRaw in bindings.bindings ? scopeRaw : parseScope(scopeRaw, ctx.discovery.accounts, ctx.configuredUser)
    ) as Scope;
    const b = bindings.bindings[scope];
    if (!b) throw new PolicyError('binding_not_found', `nothing is bound to ${scope}`, { scope });
    const rest = { ...bindings.bindings };
    delete rest[scope];
    const after: BindingsDoc = { version: 1, bindings: rest };
    const t = judgeTransition(
      withFloorState(ctx, bindings),
      withFloorState(ctx, after),
      affectedSubjects(scope, ctx.discovery),
      scope,
    );
    if (t.unjudgeable.length) throw unjudgeableError(`unbind ${scope}`, t.unjudgeable);
    const missing = t.findings.filter((f) => !acks.includes(f.token)).map((f) => f.token);
    if (missing.length) throw refuse(`unbind ${scope}`, t.findings, missing, { scope, profile: b.profile });
    const st = loadProfile(ctx.stateDir, b.profile);
    ledgerAppend(ctx.stateDir, {
      op: 'unbind',
      scope,
      profile: b.profile,
      profile_hash: st.status === 'ok' ? st.hash : null,
      binding_acks: b.acks,
      findings: t.findings.map((f) => f.token),
      acks: t.findings.map((f) => f.token),
    });
    testPause('after-ledger', bindingsFile(ctx.stateDir));
    writeBindings(ctx.stateDir, after);
    return {
      scope,
      profile: b.profile,
      findings: t.findings,
      impact: impactOf(withFloorState(ctx, after), ctx.discovery),
    };
  });
}

export interface SaveResult {
  name: string;
  created: boolean;
  hash: string;
  boundTo: Scope[];
  acksAdded: Record<string, string[]>;
  impact: Impact[];
}

/**
 * `leash profile save NAME --from FILE`: re-judges every binding that names the profile against
 * the bindings as they are under the lock. Per-agent consent rides on the edit as
 * `agent:NAME=field:value` and is appended to that agent's binding only. Bindings are written
 * first and the profile second (a crash between leaves inert, stale consent, never a loosened
 * profile beside agents that did not consent); a failed profile write puts the bindings back.
 */
export async function saveProfile(
  ctx: StoreContext,
  name: string,
  text: string,
  source: string,
  acksRaw: string[],
): Promise<SaveResult> {
  checkProfileName(name);
  const fragment = parseProfileText(text, source);
  const inert = inertInFragment(fragment, ctx.floor);
  if (inert.length) {
    throw new PolicyError(
      'profile_inert_entry',
      `${source} has entries that can never decide anything:\n${inert.map((i) => `  ${i.path} ${JSON.stringify(i.entry)}: ${i.why}`).join('\n')}`,
      {
        inert,
      },
    );
  }
  const perAgent = new Map<string, string[]>();
  const badAcks: string[] = [];
  for (const a of acksRaw) {
    const p = parseAgentAck(a);
    if (!p) badAcks.push(a);
    else perAgent.set(p.account, [...(perAgent.get(p.account) ?? []), p.token]);
  }
  if (badAcks.length) {
    throw new PolicyError(
      'ack_invalid',
      `consent on a profile edit names its agent: --ack 'agent:<account>=field:value' (global consent goes through leash bind global): ${badAcks.join(', ')}`,
      { acks: badAcks },
    );
  }
  const newSt: ProfileStatus = { status: 'ok', name, fragment, hash: hashText(text), text };
  fs.mkdirSync(ctx.stateDir, { recursive: true, mode: 0o750 });
  return withFileLock(bindingsFile(ctx.stateDir), () => {
    const bindings = readBindings(ctx.stateDir);
    const oldSt = loadProfile(ctx.stateDir, name);
    const loader = profileLoader(ctx.stateDir);
    const before = withFloorState(ctx, bindings, loader);
    const afterLoader = override(loader, name, newSt);
    const bound = (Object.entries(bindings.bindings) as [Scope, Binding][]).filter(([, b]) => b.profile === name);
    const boundAgents = new Set(bound.filter(([s]) => s !== 'global').map(([s]) => s.slice('agent:'.length)));
    const strangers = [...perAgent.keys()].filter((a) => !boundAgents.has(a));
    if (strangers.length) {
      throw new PolicyError('ack_invalid', `--ack names agents not bound to ${name}: ${strangers.join(', ')}`, {
        accounts: strangers,
      });
    }
    const missing: string[] = [];
    const all: Loosening[] = [];
    const nextBindings: BindingsDoc = { version: 1, bindings: structuredClone(bindings.bindings) };
    const acksAdded: Record<string, string[]> = {};
    const ledger: { scope: Scope; tokens: string[] }[] = [];
    const g = bindings.bindings.global;
    if (g && g.profile === name) {
      const gm = judgeOverlay(ctx.floor, fragment).filter((f) => !g.acks.includes(f.token));
      if (gm.length) {
        throw refuse(
          `profile save ${name} (bound to global)`,
          gm,
          gm.map((f) => f.token),
          {
            global: true,
            hint: `consent for global is taken only by leash bind global: save the edit under a new name and run: leash bind global NEWNAME ${gm.map((f) => `--ack '${f.token}'`).join(' ')}`,
          },
        );
      }
    }
    const afterState = withFloorState(ctx, bindings, afterLoader);
    for (const [scope, b] of bound) {
      if (scope === 'global') continue;
      const account = scope.slice('agent:'.length);
      const given = perAgent.get(account) ?? [];
      const base = bindingFindings(scope, fragment, afterState);
      const baseTokens = base.map((f) => f.token);
      const subj = affectedSubjects(scope, ctx.discovery);
      const consentDoc: BindingsDoc = {
        version: 1,
        bindings: { ...bindings.bindings, [scope]: { profile: name, acks: baseTokens } },
      };
      const t = judgeTransition(before, withFloorState(ctx, consentDoc, afterLoader), subj, scope);
      if (t.unjudgeable.length) throw unjudgeableError(`profile save ${name} for ${scope}`, t.unjudgeable);
      const required = mergeFindings(base, t.findings);
      for (const f of required) {
        if (!b.acks.includes(f.token) && !given.includes(f.token)) {
          missing.push(`agent:${account}=${f.token}`);
          all.push({ ...f, words: `${account}: ${f.words}` });
        } else if (!b.acks.includes(f.token)) all.push({ ...f, words: `${account}: ${f.words}` });
      }
      const add = given.filter((tk) => baseTokens.includes(tk) && !b.acks.includes(tk));
      if (add.length) {
        nextBindings.bindings[scope] = { profile: name, acks: [...b.acks, ...add] };
        acksAdded[account] = add;
      }
      const changeOnly = t.findings.filter((f) => !baseTokens.includes(f.token)).map((f) => f.token);
      if (changeOnly.length) ledger.push({ scope, tokens: changeOnly });
    }
    if (missing.length) throw refuse(`profile save ${name}`, all, missing, { profile: name, perAgent: true });
    const oldBindingsText = fs.existsSync(bindingsFile(ctx.stateDir))
      ? fs.readFileSync(bindingsFile(ctx.stateDir), 'utf8')
      : null;
    const bindingsChanged = Object.keys(acksAdded).length > 0;
    if (bindingsChanged) writeBindings(ctx.stateDir, nextBindings);
    for (const e of ledger)
      ledgerAppend(ctx.stateDir, { op: 'edit', scope: e.scope, profile: name, findings: e.tokens, acks: e.tokens });
    testPause('between-writes', bindingsFile(ctx.stateDir));
    try {
      writeProfileText(ctx.stateDir, name, text);
    } catch (e) {
      if (bindingsChanged) {
        if (oldBindingsText === null) fs.rmSync(bindingsFile(ctx.stateDir), { force: true });
        else atomicWriteFileSync(bindingsFile(ctx.stateDir), oldBindingsText);
      }
      throw e;
    }
    return {
      name,
      created: oldSt.status === 'missing',
      hash: newSt.hash,
      boundTo: bound.map(([s]) => s),
      acksAdded,
      impact: impactOf(withFloorState(ctx, nextBindings), ctx.discovery),
    };
  });
}

export interface DeleteResult {
  name: string;
  /** Bindings now dangling: each holds its agent fail-closed until unbound with fail_closed:<profile>. */
  dangling: Scope[];
  impact: Impact[];
}

/** Deleting only tightens: a binding naming the profile dangles and holds its subject fail-closed. */
export async function deleteProfile(ctx: StoreContext, name: string): Promise<DeleteResult> {
  checkProfileName(name);
  fs.mkdirSync(ctx.stateDir, { recursive: true, mode: 0o750 });
  return withFileLock(bindingsFile(ctx.stateDir), () => {
    if (loadProfile(ctx.stateDir, name).status === 'missing')
      throw new PolicyError('profile_not_found', `no profile ${name}`, { profile: name });
    removeProfileFile(ctx.stateDir, name);
    const bindings = readBindings(ctx.stateDir);
    const dangling = (Object.entries(bindings.bindings) as [Scope, Binding][])
      .filter(([, b]) => b.profile === name)
      .map(([s]) => s);
    return { name, dangling, impact: impactOf(withFloorState(ctx, bindings), ctx.discovery) };
  });
}

/** A binding as `leash bindings` shows it. */
export interface BindingView {
  scope: Scope;
  profile: string;
  acks: string[];
  profileStatus: ProfileStatus['status'];
  /** The accounts it resolves for (empty = nobody: a warning of leash validate). */
  subjects: string[];
}

export function listBindings(ctx: StoreContext): BindingView[] {
  const bindings = readBindings(ctx.stateDir);
  const loader = profileLoader(ctx.stateDir);
  return (Object.entries(bindings.bindings) as [Scope, Binding][]).map(([scope, b]) => ({
    scope,
    profile: b.profile,
    acks: b.acks,
    profileStatus: loader(b.profile).status,
    subjects: affectedSubjects(scope, ctx.discovery).map((s) => s.account),
  }));
}
