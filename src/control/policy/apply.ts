/**
 * `leash apply -f DIR`: makes the host's profiles and bindings exactly those in DIR (docs/cli.md):
 *
 *   DIR/profiles/<name>.yaml   one profile per file (the fragment `leash profile save` takes)
 *   DIR/bindings.yaml          version: 1
 *                              bindings: { <scope>: { profile: <name>, acks: [<token>...] } }
 *                              acks: { <scope>: [<token>...] }   (optional: consent to what the change itself
 *                                                                 loosens for a scope, e.g. a removed binding)
 *
 * Everything in DIR is read and checked first (every problem of every file, named with its file and
 * line); then, under the one writer lock, the whole change is judged against the state as it is then,
 * subject by subject, as the service resolves them; a loosening without its ack in the files refuses
 * the whole DIR. Nothing changed is no write at all. A change is one commit record (pending.ts) and
 * then the files: never a half-applied state.
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseStrictYaml, readPolicyFile } from '../../formats/yaml.js';
import { LeashError, isLeashError } from '../../errors.js';
import { AGENT_PREFIX } from '../subjects/discovery.js';
import type { Binding, BindingsDoc, Scope } from './bindings.js';
import { SCOPE_RE, ledgerAppend, readBindings, serializeBindings } from './bindings.js';
import type { StoreContext } from './consent.js';
import { bindingFindings, refuse, unjudgeableError } from './consent.js';
import { inertInFragment } from './inert.js';
import type { Loosening } from './loosen.js';
import { loosenings, mergeFindings, parseToken } from './loosen.js';
import { commitPending, rollForward, withWriterLock, type PendingApply } from './pending.js';
import type { ProfileStatus } from './profiles.js';
import { PROFILE_NAME, hashText, listProfiles, parseProfileText, profileLoader, profilePath } from './profiles.js';
import type { PolicyState, SubjectFailure } from './resolve.js';
import { resolveSubject } from './resolve.js';

/** One problem of DIR: the file, where in it (`line 3, column 5` or a key path), what. */
export interface DirIssue {
  file: string;
  path: string;
  message: string;
  code: string;
}

export interface ApplyDir {
  dir: string;
  profiles: Map<string, string>;
  /** The bindings as the files give them (acks as written). */
  bindings: BindingsDoc;
  /** Consent to what the change itself loosens, by scope. */
  acks: Partial<Record<Scope, string[]>>;
}

function issuesOf(e: unknown, file: string): DirIssue[] {
  if (isLeashError(e)) {
    const issues = (e.details?.issues as { path: string; message: string }[] | undefined) ?? [];
    // A profile's own refusal carries the reader's code (config_syntax, config_invalid…) as its cause.
    const code = typeof e.details?.cause === 'string' ? e.details.cause : e.code;
    if (issues.length) return issues.map((i) => ({ file, path: i.path, message: i.message, code }));
    return [{ file, path: '(file)', message: e.message, code: e.code }];
  }
  return [{ file, path: '(file)', message: (e as Error).message, code: 'internal' }];
}

function readProfilesDir(dir: string, issues: DirIssue[]): Map<string, string> {
  const pdir = path.join(dir, 'profiles');
  const out = new Map<string, string>();
  let names: string[] = [];
  try {
    names = fs.readdirSync(pdir).sort();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT')
      issues.push({ file: pdir, path: '(directory)', message: (e as Error).message, code: 'config_unreadable' });
    return out;
  }
  for (const n of names) {
    // Dot entries are not profiles (a Kubernetes ConfigMap volume keeps its ..data links there).
    if (n.startsWith('.')) continue;
    const file = path.join(pdir, n);
    const name = n.endsWith('.yaml') ? n.slice(0, -'.yaml'.length) : null;
    if (name === null || !PROFILE_NAME.test(name) || name.length > 64 || name.includes('..')) {
      issues.push({
        file,
        path: '(name)',
        message: 'a profile file is <name>.yaml, the name matching [a-z0-9][a-z0-9._-]* (at most 64)',
        code: 'profile_name_invalid',
      });
      continue;
    }
    try {
      out.set(name, readPolicyFile(file));
    } catch (e) {
      issues.push(...issuesOf(e, file));
    }
  }
  return out;
}

function tokenList(v: unknown, file: string, where: string, issues: DirIssue[]): string[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || v.some((a) => typeof a !== 'string')) {
    issues.push({ file, path: where, message: 'must be a list of ack tokens (field:value)', code: 'ack_invalid' });
    return [];
  }
  const bad = (v as string[]).filter((a) => !parseToken(a));
  if (bad.length)
    issues.push({
      file,
      path: where,
      message: `not an ack token (field:value): ${bad.join(', ')}`,
      code: 'ack_invalid',
    });
  return v as string[];
}

function readBindingsFile(dir: string, issues: DirIssue[]): Pick<ApplyDir, 'bindings' | 'acks'> {
  const file = path.join(dir, 'bindings.yaml');
  const out: Pick<ApplyDir, 'bindings' | 'acks'> = { bindings: { version: 1, bindings: {} }, acks: {} };
  let doc: unknown;
  try {
    doc = parseStrictYaml(readPolicyFile(file), file, { uniqueKeys: true }).js;
  } catch (e) {
    issues.push(...issuesOf(e, file));
    return out;
  }
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) {
    issues.push({
      file,
      path: '(document)',
      message: 'must be a mapping with version: 1 and bindings',
      code: 'config_invalid',
    });
    return out;
  }
  const d = doc as Record<string, unknown>;
  for (const k of Object.keys(d))
    if (!['version', 'bindings', 'acks'].includes(k))
      issues.push({ file, path: k, message: 'unknown key (version, bindings, acks)', code: 'config_invalid' });
  if (d.version !== 1) issues.push({ file, path: 'version', message: 'must be 1', code: 'config_invalid' });
  const section = (key: 'bindings' | 'acks'): [string, unknown][] => {
    const v = d[key];
    if (v === undefined || v === null) return [];
    if (typeof v !== 'object' || Array.isArray(v)) {
      issues.push({ file, path: key, message: 'must be a mapping of scopes', code: 'config_invalid' });
      return [];
    }
    const rows = Object.entries(v as Record<string, unknown>);
    for (const [scope] of rows)
      if (!SCOPE_RE.test(scope))
        issues.push({
          file,
          path: `${key}.${scope}`,
          message: 'a scope is global or agent:<account>',
          code: 'scope_invalid',
        });
    return rows.filter(([scope]) => SCOPE_RE.test(scope));
  };
  if (d.bindings === undefined)
    issues.push({ file, path: 'bindings', message: 'missing (write bindings: {} for none)', code: 'config_invalid' });
  for (const [scope, v] of section('bindings')) {
    const where = `bindings.${scope}`;
    const e = v as { profile?: unknown; acks?: unknown } | null;
    if (e === null || typeof e !== 'object' || Array.isArray(e)) {
      issues.push({ file, path: where, message: 'must be { profile: NAME, acks: [...] }', code: 'config_invalid' });
      continue;
    }
    for (const k of Object.keys(e))
      if (k !== 'profile' && k !== 'acks')
        issues.push({ file, path: `${where}.${k}`, message: 'unknown key (profile, acks)', code: 'config_invalid' });
    if (typeof e.profile !== 'string') {
      issues.push({
        file,
        path: `${where}.profile`,
        message: 'missing: the profile bound here',
        code: 'config_invalid',
      });
      continue;
    }
    out.bindings.bindings[scope as Scope] = {
      profile: e.profile,
      acks: tokenList(e.acks, file, `${where}.acks`, issues),
    };
  }
  for (const [scope, v] of section('acks')) out.acks[scope as Scope] = tokenList(v, file, `acks.${scope}`, issues);
  return out;
}

/** Reads and checks DIR whole; `apply_invalid` names every problem of every file. */
export function readApplyDir(dir: string, ctx: Pick<StoreContext, 'floor'>): ApplyDir {
  const issues: DirIssue[] = [];
  let st: fs.Stats | null = null;
  try {
    st = fs.statSync(dir);
  } catch {
    st = null;
  }
  if (!st?.isDirectory()) throw new LeashError('apply_invalid', `${dir} is not a directory`, { dir, issues: [] });
  const profiles = readProfilesDir(dir, issues);
  for (const [name, text] of profiles) {
    const file = path.join(dir, 'profiles', `${name}.yaml`);
    try {
      const fragment = parseProfileText(text, file);
      for (const i of inertInFragment(fragment, ctx.floor))
        issues.push({
          file,
          path: i.path,
          message: `${JSON.stringify(i.entry)} can never decide anything: ${i.why}`,
          code: 'profile_inert_entry',
        });
    } catch (e) {
      issues.push(...issuesOf(e, file));
    }
  }
  const b = readBindingsFile(dir, issues);
  const bfile = path.join(dir, 'bindings.yaml');
  for (const [scope, x] of Object.entries(b.bindings.bindings) as [Scope, Binding][])
    if (!profiles.has(x.profile))
      issues.push({
        file: bfile,
        path: `bindings.${scope}.profile`,
        message: `no profile ${x.profile} in ${path.join(dir, 'profiles')}`,
        code: 'profile_not_found',
      });
  if (issues.length) {
    throw new LeashError(
      'apply_invalid',
      `${dir} is refused whole (${issues.length} problem${issues.length === 1 ? '' : 's'}); nothing was changed`,
      { dir, issues: issues.map((i) => ({ ...i, path: `${i.file}: ${i.path}` })) },
    );
  }
  return { dir, profiles, ...b };
}

export interface ApplyFinding {
  scope: Scope;
  account: string;
  token: string;
  words: string;
  /** Where its consent is: the binding's acks, the acks section, or nowhere (refused). */
  acked: 'binding' | 'acks' | null;
}

export interface ApplyPlan {
  changed: boolean;
  profiles: { added: string[]; changed: { name: string; diff: string[] }[]; removed: string[] };
  bindings: {
    added: { scope: Scope; profile: string; acks: string[] }[];
    changed: { scope: Scope; from: Binding; to: Binding }[];
    removed: { scope: Scope; profile: string }[];
  };
  findings: ApplyFinding[];
  warnings: string[];
  /** Acks in the files with nothing to consent to. */
  ignoredAcks: string[];
}

/** A short line diff (longest common subsequence), `-`/`+`/` ` prefixed: what a dry run prints. */
export function lineDiff(a: string, b: string): string[] {
  const x = a.split('\n');
  const y = b.split('\n');
  if (x.length * y.length > 4_000_000) return [`- (${x.length} lines)`, `+ (${y.length} lines)`];
  const n = x.length;
  const m = y.length;
  const L = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--)
    for (let j = m - 1; j >= 0; j--)
      L[i]![j] = x[i] === y[j] ? L[i + 1]![j + 1]! + 1 : Math.max(L[i + 1]![j]!, L[i]![j + 1]!);
  const out: string[] = [];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && x[i] === y[j]) {
      out.push(`  ${x[i]}`);
      i++;
      j++;
    } else if (j < m && (i >= n || L[i]![j + 1]! >= L[i + 1]![j]!)) out.push(`+ ${y[j++]}`);
    else out.push(`- ${x[i++]}`);
  }
  while (out.length && out[out.length - 1] === '  ') out.pop();
  return out;
}

function sameBinding(a: Binding | undefined, b: Binding | undefined): boolean {
  if (!a || !b) return a === b;
  return a.profile === b.profile && a.acks.length === b.acks.length && a.acks.every((t, i) => t === b.acks[i]);
}

function dirLoader(profiles: Map<string, string>, dir: string): (n: string) => ProfileStatus {
  return (name) => {
    const text = profiles.get(name);
    if (text === undefined) return { status: 'missing', name };
    return {
      status: 'ok',
      name,
      fragment: parseProfileText(text, path.join(dir, 'profiles', `${name}.yaml`)),
      hash: hashText(text),
      text,
    };
  };
}

function currentProfiles(stateDir: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const name of listProfiles(stateDir)) {
    try {
      out.set(name, fs.readFileSync(profilePath(stateDir, name), 'utf8'));
    } catch {
      out.set(name, '');
    }
  }
  return out;
}

interface Judged {
  plan: ApplyPlan;
  next: BindingsDoc;
  /** Transition-only consent, per scope, for the ledger. */
  ledger: { scope: Scope; tokens: string[] }[];
}

/**
 * Judges DIR against the state as it is (call under the lock): what changes, and for every subject
 * on this host every loosening from its resolution now to its resolution after, each with where its
 * consent is in the files.
 */
function judge(ctx: StoreContext, d: ApplyDir): Judged {
  const warnings: string[] = [];
  const accounts = new Map(ctx.discovery.accounts.map((a) => [a.name, a]));
  for (const scope of [...Object.keys(d.bindings.bindings), ...Object.keys(d.acks)] as Scope[]) {
    if (scope === 'global') continue;
    const name = scope.slice('agent:'.length);
    if (name === ctx.configuredUser)
      throw new LeashError('scope_invalid', `${scope}: ${name} is the configured user and has no tier of its own`, {
        scope,
      });
    if (accounts.has(name) && !name.startsWith(AGENT_PREFIX))
      throw new LeashError('scope_invalid', `${scope}: ${name} is not an agent account (${AGENT_PREFIX}*)`, { scope });
    if (!accounts.has(name) && scope in d.bindings.bindings)
      warnings.push(`${scope}: no such account on this host; the binding applies when it appears`);
  }
  const loader = dirLoader(d.profiles, d.dir);
  // Binding acks are kept to what the binding itself needs (as leash bind stores them).
  const trial: PolicyState = { floor: ctx.floor, bindings: d.bindings, profile: loader };
  const next: BindingsDoc = { version: 1, bindings: {} };
  // The same with every binding's own consent granted: what the change does beyond the bindings themselves.
  const granted: BindingsDoc = { version: 1, bindings: {} };
  const used = new Set<string>();
  for (const [scope, b] of Object.entries(d.bindings.bindings) as [Scope, Binding][]) {
    const st = loader(b.profile);
    const base = st.status === 'ok' ? bindingFindings(scope, st.fragment, trial).map((f) => f.token) : [];
    next.bindings[scope] = { profile: b.profile, acks: b.acks.filter((t) => base.includes(t)) };
    granted.bindings[scope] = { profile: b.profile, acks: base };
  }
  const before: PolicyState = {
    floor: ctx.floor,
    bindings: readBindings(ctx.stateDir),
    profile: profileLoader(ctx.stateDir),
  };
  const after: PolicyState = { floor: ctx.floor, bindings: next, profile: loader };
  const whole: PolicyState = { floor: ctx.floor, bindings: granted, profile: loader };
  const findings: ApplyFinding[] = [];
  const ledger = new Map<Scope, Set<string>>();
  const unjudgeable: { account: string; failure: SubjectFailure }[] = [];
  for (const s of ctx.discovery.subjects) {
    const own: Scope | null = s.kind === 'agent' ? `agent:${s.account}` : null;
    const ra = resolveSubject(s, after);
    const rw = resolveSubject(s, whole);
    if (!ra.ok && ra.failure.code !== 'unacknowledged_loosening') {
      unjudgeable.push({ account: s.account, failure: ra.failure });
      continue;
    }
    if (!rw.ok) {
      unjudgeable.push({ account: s.account, failure: rw.failure });
      continue;
    }
    // A binding's own loosenings without their acks: named first, every one.
    const seen = new Set<string>();
    if (!ra.ok)
      for (const f of ra.failure.missing ?? []) {
        seen.add(f.token);
        findings.push({ scope: ra.failure.scope, account: s.account, token: f.token, words: f.words, acked: null });
      }
    const rb = resolveSubject(s, before);
    const list: Loosening[] = rb.ok
      ? loosenings(rb.policy, rw.policy)
      : [
          {
            field: 'fail_closed',
            value: rb.failure.profile,
            token: `fail_closed:${rb.failure.profile}`,
            words: `${s.account} leaves fail-closed (${rb.failure.code}, profile ${rb.failure.profile}): denied everything -> a resolved policy`,
          },
        ];
    for (const f of mergeFindings(list)) {
      if (seen.has(f.token)) continue;
      const inBinding = [own, 'global' as const].some((sc) => sc && next.bindings[sc]?.acks.includes(f.token));
      const ackScope = ([own, 'global'] as (Scope | null)[]).find(
        (sc) => sc && (d.acks[sc]?.includes(f.token) || d.bindings.bindings[sc]?.acks.includes(f.token)),
      );
      const acked = inBinding ? 'binding' : ackScope ? 'acks' : null;
      findings.push({ scope: own ?? 'global', account: s.account, token: f.token, words: f.words, acked });
      if (acked === 'acks' && ackScope) {
        used.add(`${ackScope}=${f.token}`);
        const set = ledger.get(ackScope) ?? new Set<string>();
        set.add(f.token);
        ledger.set(ackScope, set);
      }
    }
  }
  if (unjudgeable.length) throw unjudgeableError(`apply ${d.dir}`, unjudgeable);
  for (const [scope, b] of Object.entries(next.bindings) as [Scope, Binding][])
    for (const t of b.acks) used.add(`${scope}=${t}`);
  const ignoredAcks = [
    ...(Object.entries(d.bindings.bindings) as [Scope, Binding][]).flatMap(([sc, b]) =>
      b.acks.map((t) => `${sc}=${t}`),
    ),
    ...(Object.entries(d.acks) as [Scope, string[]][]).flatMap(([sc, ts]) => ts.map((t) => `${sc}=${t}`)),
  ].filter((x) => !used.has(x));

  const cur = currentProfiles(ctx.stateDir);
  const plan: ApplyPlan = {
    changed: false,
    profiles: { added: [], changed: [], removed: [] },
    bindings: { added: [], changed: [], removed: [] },
    findings,
    warnings,
    ignoredAcks: [...new Set(ignoredAcks)],
  };
  for (const [name, text] of d.profiles) {
    const old = cur.get(name);
    if (old === undefined) plan.profiles.added.push(name);
    else if (old !== text) plan.profiles.changed.push({ name, diff: lineDiff(old, text) });
  }
  for (const name of cur.keys()) if (!d.profiles.has(name)) plan.profiles.removed.push(name);
  const was = before.bindings.bindings;
  for (const [scope, b] of Object.entries(next.bindings) as [Scope, Binding][]) {
    const o = was[scope];
    if (!o) plan.bindings.added.push({ scope, profile: b.profile, acks: b.acks });
    else if (!sameBinding(o, b)) plan.bindings.changed.push({ scope, from: o, to: b });
  }
  for (const [scope, o] of Object.entries(was) as [Scope, Binding][])
    if (!next.bindings[scope]) plan.bindings.removed.push({ scope, profile: o.profile });
  const p = plan.profiles;
  const bb = plan.bindings;
  plan.changed = [p.added, p.changed, p.removed, bb.added, bb.changed, bb.removed].some((l) => l.length > 0);
  return { plan, next, ledger: [...ledger].map(([scope, t]) => ({ scope, tokens: [...t] })) };
}

export interface ApplyResult extends ApplyPlan {
  dryRun: boolean;
}

function throwIfRefused(d: ApplyDir, plan: ApplyPlan): void {
  const missing = plan.findings.filter((f) => f.acked === null);
  if (!missing.length) return;
  const all = plan.findings.map((f) => ({ field: '', value: '', token: f.token, words: `${f.account}: ${f.words}` }));
  throw refuse(`apply ${d.dir}`, all, [...new Set(missing.map((f) => `${f.scope}=${f.token}`))], {
    dir: d.dir,
    consentInFiles: true,
    hint: `${d.dir} is refused whole and nothing was changed: put each token in bindings.yaml, under the scope's binding acks or under acks: <scope>: [...]`,
  });
}

/**
 * Applies DIR (or, with dryRun, only judges it). Under the writer lock throughout: the judgement is of
 * the state as it is when the change is written.
 */
export async function applyDir(ctx: StoreContext, d: ApplyDir, opts: { dryRun: boolean }): Promise<ApplyResult> {
  const run = (): ApplyResult => {
    const j = judge(ctx, d);
    throwIfRefused(d, j.plan);
    if (opts.dryRun || !j.plan.changed) return { ...j.plan, dryRun: opts.dryRun };
    for (const e of j.ledger)
      ledgerAppend(ctx.stateDir, { op: 'apply', scope: e.scope, dir: d.dir, findings: e.tokens, acks: e.tokens });
    const record: PendingApply = {
      version: 1,
      profiles: Object.fromEntries(d.profiles),
      bindings: serializeBindings(j.next),
    };
    commitPending(ctx.stateDir, record);
    rollForward(ctx.stateDir, record);
    return { ...j.plan, dryRun: false };
  };
  // A dry run takes the lock too (what it judges is the state no writer is halfway through), but on a host with
  // no state directory yet it creates nothing: there is no writer to wait for.
  if (opts.dryRun && !fs.existsSync(ctx.stateDir)) return run();
  fs.mkdirSync(ctx.stateDir, { recursive: true, mode: 0o750 });
  return withWriterLock(ctx.stateDir, run);
}
