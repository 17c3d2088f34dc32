/**
 * The commands that change bindings and profiles (`leash bind`, `unbind`, `profile save`,
 * `profile delete`) and the bindings view: each judged first (consent.ts), then again under the
 * one writer lock against the store as it is then (bindings.ts, profiles.ts).
 */
import fs from 'node:fs';
import { LeashError } from '../../errors.js';
import { atomicWriteFileSync, testPause } from '../../store/files.js';
import { withWriterLock } from './pending.js';
import type { Binding, BindingsDoc, Scope } from './bindings.js';
import { bindingsFile, ledgerAppend, parseScope, readBindings, writeBindings } from './bindings.js';
import type { BindJudgement, Impact, StoreContext } from './consent.js';
import {
  affectedSubjects,
  bindingFindings,
  checkAckTokens,
  impactOf,
  judgeBind,
  judgeTransition,
  override,
  refuse,
  unjudgeableError,
  withFloorState,
} from './consent.js';
import { inertInFragment } from './inert.js';
import type { Loosening } from './loosen.js';
import { judgeOverlay, mergeFindings, parseAgentAck } from './loosen.js';
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

export interface BindResult {
  scope: Scope;
  profile: string;
  findings: Loosening[];
  acks: string[];
  replaced: string | null;
  /** The binding's mode: its own `enforce`, else its profile's (`enforce` when neither sets it). */
  enforce: 'enforce' | 'shadow';
  impact: Impact[];
  ignoredAcks: string[];
}

/**
 * `leash bind SCOPE PROFILE`: judged before the lock (fast refusal), then again under the one
 * writer lock against the bindings as they are then, after checking that the profile judged is
 * still the one on disk.
 */
/**
 * `leash bind SCOPE PROFILE [--enforce enforce|shadow]`: `enforce` set on the binding wins over the
 * profile's own `enforce`; absent, a re-bind keeps the binding's present setting for the same profile.
 */
export async function bind(
  ctx: StoreContext,
  scopeRaw: string,
  name: string,
  acks: string[],
  enforceArg?: 'enforce' | 'shadow',
): Promise<BindResult> {
  checkProfileName(name);
  checkAckTokens(acks);
  const scope = parseScope(scopeRaw, ctx.discovery.accounts, ctx.configuredUser);
  // Consent already on this scope's binding of the same profile still counts (a re-bind is idempotent).
  const held = (bindings: BindingsDoc): string[] => {
    const old = bindings.bindings[scope];
    return old && old.profile === name ? old.acks : [];
  };
  const enforceOf = (bindings: BindingsDoc): 'enforce' | 'shadow' | undefined => {
    const old = bindings.bindings[scope];
    return enforceArg ?? (old && old.profile === name ? old.enforce : undefined);
  };
  const judge = (bindings: BindingsDoc, st: ProfileStatus): BindJudgement => {
    const j = judgeBind(ctx, bindings, scope, name, st, enforceOf(bindings));
    const have = [...acks, ...held(bindings)];
    const missing = j.required.filter((f) => !have.includes(f.token)).map((f) => f.token);
    if (missing.length) throw refuse(`bind ${scope} ${name}`, j.required, missing, { scope, profile: name });
    return j;
  };
  const pre = judge(readBindings(ctx.stateDir), loadProfile(ctx.stateDir, name));
  fs.mkdirSync(ctx.stateDir, { recursive: true, mode: 0o750 });
  return withWriterLock(ctx.stateDir, () => {
    const st = loadProfile(ctx.stateDir, name);
    if (st.status !== 'ok' || st.hash !== pre.hash) {
      throw new LeashError(
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
    const enforce = enforceOf(bindings);
    const next: BindingsDoc = {
      version: 1,
      bindings: {
        ...bindings.bindings,
        [scope]: { profile: name, acks: stored, ...(enforce !== undefined ? { enforce } : {}) },
      },
    };
    writeBindings(ctx.stateDir, next);
    const requiredTokens = j.required.map((f) => f.token);
    return {
      scope,
      profile: name,
      findings: j.required,
      acks: stored,
      replaced: old ? old.profile : null,
      enforce: enforce ?? st.fragment.enforce ?? 'enforce',
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
  return withWriterLock(ctx.stateDir, () => {
    const bindings = readBindings(ctx.stateDir);
    const scope = (
      scopeRaw in bindings.bindings ? scopeRaw : parseScope(scopeRaw, ctx.discovery.accounts, ctx.configuredUser)
    ) as Scope;
    const b = bindings.bindings[scope];
    if (!b) throw new LeashError('binding_not_found', `nothing is bound to ${scope}`, { scope });
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
    throw new LeashError(
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
    throw new LeashError(
      'ack_invalid',
      `consent on a profile edit names its agent: --ack 'agent:<account>=field:value' (global consent goes through leash bind global): ${badAcks.join(', ')}`,
      { acks: badAcks },
    );
  }
  const newSt: ProfileStatus = { status: 'ok', name, fragment, hash: hashText(text), text };
  fs.mkdirSync(ctx.stateDir, { recursive: true, mode: 0o750 });
  return withWriterLock(ctx.stateDir, () => {
    const bindings = readBindings(ctx.stateDir);
    const oldSt = loadProfile(ctx.stateDir, name);
    const loader = profileLoader(ctx.stateDir);
    const before = withFloorState(ctx, bindings, loader);
    const afterLoader = override(loader, name, newSt);
    const bound = (Object.entries(bindings.bindings) as [Scope, Binding][]).filter(([, b]) => b.profile === name);
    const boundAgents = new Set(bound.filter(([s]) => s !== 'global').map(([s]) => s.slice('agent:'.length)));
    const strangers = [...perAgent.keys()].filter((a) => !boundAgents.has(a));
    if (strangers.length) {
      throw new LeashError('ack_invalid', `--ack names agents not bound to ${name}: ${strangers.join(', ')}`, {
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
  return withWriterLock(ctx.stateDir, () => {
    if (loadProfile(ctx.stateDir, name).status === 'missing')
      throw new LeashError('profile_not_found', `no profile ${name}`, { profile: name });
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
  /** The binding's mode: its own `enforce`, else its profile's, else `enforce`. */
  enforce: 'enforce' | 'shadow';
  /** The accounts it resolves for (empty = nobody: a warning of leash validate). */
  subjects: string[];
}

export function listBindings(ctx: StoreContext): BindingView[] {
  const bindings = readBindings(ctx.stateDir);
  const loader = profileLoader(ctx.stateDir);
  return (Object.entries(bindings.bindings) as [Scope, Binding][]).map(([scope, b]) => {
    const st = loader(b.profile);
    return {
      scope,
      profile: b.profile,
      acks: b.acks,
      profileStatus: st.status,
      enforce: b.enforce ?? (st.status === 'ok' ? st.fragment.enforce : undefined) ?? 'enforce',
      subjects: affectedSubjects(scope, ctx.discovery).map((s) => s.account),
    };
  });
}
