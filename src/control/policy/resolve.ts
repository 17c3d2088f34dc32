import { createHash } from 'node:crypto';
import type { Subject } from '../subjects/discovery.js';
import type { BindingsDoc, Scope } from './bindings.js';
import { bindingFragment } from './bindings.js';
import type { Effective, Fragment } from './fragment.js';
import { canonicalJson, fold } from './fragment.js';
import type { Loosening } from './loosen.js';
import { judgeOverlay, unacknowledged } from './loosen.js';
import type { ProfileStatus } from './profiles.js';

/** Everything a resolution reads, already loaded: the floor, the bindings, and a profile lookup. */
export interface PolicyState {
  floor: Effective;
  bindings: BindingsDoc;
  profile: (name: string) => ProfileStatus;
}

export type SubjectFailureCode = 'dangling_profile' | 'broken_profile' | 'unacknowledged_loosening';

/** Why one subject cannot be resolved. It fails alone: no chain, every fs/exec event denied. */
export interface SubjectFailure {
  code: SubjectFailureCode;
  scope: Scope;
  profile: string;
  message: string;
  /** For unacknowledged_loosening: what the binding would have to acknowledge. */
  missing?: Loosening[];
}

/**
 * Where each policy key of a resolution came from: `network.allow` -> `floor`, `global=web` or
 * `agent:leash-iris=web`. A tier that sets a key replaces the base's value whole (lists included),
 * so every entry of a list comes from the layer named for that list.
 */
export type Sources = Record<string, string>;

export type Resolution =
  | { ok: true; policy: Effective; hash: string; layers: string[]; sources: Sources }
  | { ok: false; failure: SubjectFailure };

/** Hash of the canonical resolved policy: what the reconcile compares to decide "changed". */
export function policyHash(p: Effective): string {
  return createHash('sha256').update(canonicalJson(p)).digest('hex');
}

type Layer =
  { ok: true; policy: Effective; name: string; fragment?: Fragment } | { ok: false; failure: SubjectFailure };

/** The dotted keys a fragment sets (`network.allow`, `tools.inspect.secrets`, `fail_mode`). */
function keysSet(f: Fragment): string[] {
  const out: string[] = [];
  const walk = (o: Record<string, unknown>, prefix: string): void => {
    for (const [k, v] of Object.entries(o)) {
      if (v === undefined) continue;
      const key = prefix ? `${prefix}.${k}` : k;
      // Sections and tools.inspect are merged key by key; every other value (lists included) replaces whole.
      if ((prefix === '' || key === 'tools.inspect') && typeof v === 'object' && v !== null && !Array.isArray(v))
        walk(v as Record<string, unknown>, key);
      else out.push(key);
    }
  };
  walk(f as Record<string, unknown>, '');
  return out;
}

/** Every dotted key of a resolved policy, attributed to the floor. */
function floorSources(p: Effective): Sources {
  return Object.fromEntries(keysSet(p as Fragment).map((k) => [k, 'floor']));
}

function addSources(sources: Sources, layer: Layer): void {
  if (layer.ok && layer.fragment) for (const k of keysSet(layer.fragment)) sources[k] = layer.name;
}

function applyBinding(base: Effective, scope: Scope, state: PolicyState): Layer | null {
  const b = state.bindings.bindings[scope];
  if (!b) return null;
  const p = state.profile(b.profile);
  if (p.status === 'missing') {
    return {
      ok: false,
      failure: {
        code: 'dangling_profile',
        scope,
        profile: b.profile,
        message: `${scope} is bound to profile ${b.profile}, which does not exist: held fail-closed`,
      },
    };
  }
  if (p.status === 'broken') {
    return {
      ok: false,
      failure: {
        code: 'broken_profile',
        scope,
        profile: b.profile,
        message: `${scope}: profile ${b.profile} is broken: ${p.message}`,
      },
    };
  }
  const fragment = bindingFragment(b, p.fragment);
  const missing = unacknowledged(judgeOverlay(base, fragment), b.acks);
  if (missing.length) {
    return {
      ok: false,
      failure: {
        code: 'unacknowledged_loosening',
        scope,
        profile: b.profile,
        message: `${scope}: profile ${b.profile} loosens without consent: ${missing.map((m) => m.token).join(', ')}`,
        missing,
      },
    };
  }
  return { ok: true, policy: fold(base, fragment), name: `${scope}=${b.profile}`, fragment };
}

/**
 * The folded floor: the floor with the global binding folded in. The global fragment is first
 * judged as an overlay on the unfolded floor, because once folded it is the baseline and would
 * classify nothing.
 */
export function foldedBase(state: PolicyState): Layer {
  const g = applyBinding(state.floor, 'global', state);
  return g ?? { ok: true, policy: state.floor, name: 'floor' };
}

/**
 * resolve(subject) = floor, then the global binding, then the subject's own agent binding.
 * The configured user has no tier of its own: no agent binding re-points the control plane.
 */
export function resolveSubject(subject: Subject, state: PolicyState): Resolution {
  const layers = ['floor'];
  const sources = floorSources(state.floor);
  const g = foldedBase(state);
  if (!g.ok) return g;
  if (g.name !== 'floor') layers.push(g.name);
  addSources(sources, g);
  let policy = g.policy;
  if (subject.kind === 'agent') {
    const a = applyBinding(policy, `agent:${subject.account}`, state);
    if (a && !a.ok) return a;
    if (a) {
      policy = a.policy;
      layers.push(a.name);
      addSources(sources, a);
    }
  } else if (policy.enforce === 'shadow') {
    // The configured user is never in shadow mode: shadow never loosens the floor for the account
    // the control plane belongs to (docs/policy.md "Shadow mode").
    policy = { ...policy, enforce: 'enforce' };
    sources.enforce = 'floor';
  }
  return { ok: true, policy, hash: policyHash(policy), layers, sources };
}

/**
 * Everything a subject's resolution reads, as one string: the floor, the global binding and the subject's own,
 * each with the status and text hash of its profile. resolveSubject is a pure function of these, so an equal key
 * resolves equally.
 */
function resolutionKey(subject: Subject, state: PolicyState, floorKey: string): string {
  const part = (scope: Scope): string => {
    const b = state.bindings.bindings[scope];
    if (!b) return '-';
    const p = state.profile(b.profile);
    const ps = p.status === 'ok' ? `ok ${p.hash}` : p.status === 'broken' ? `broken ${p.message}` : 'missing';
    return `${JSON.stringify(b)} ${ps}`;
  };
  const own = subject.kind === 'agent' ? part(`agent:${subject.account}`) : '-';
  return `${floorKey}\n${subject.kind}\n${subject.account}\n${part('global')}\n${own}`;
}

/**
 * A resolveSubject that remembers each subject's last resolution and its key, for a caller that resolves the same
 * subjects again and again (the service's reconcile: at 1,000 subjects, folding and judging every binding anew
 * was most of a pass in which one profile changed). A subject whose inputs are unchanged gets the same
 * Resolution object back; one the last pass did not resolve is forgotten.
 */
export function createResolver(): { resolve(subject: Subject, state: PolicyState): Resolution; endPass(): void } {
  let prev = new Map<string, { key: string; resolution: Resolution }>();
  let cur = new Map<string, { key: string; resolution: Resolution }>();
  const floorKeys = new WeakMap<Effective, string>();
  return {
    resolve(subject, state) {
      let fk = floorKeys.get(state.floor);
      if (fk === undefined) {
        fk = canonicalJson(state.floor);
        floorKeys.set(state.floor, fk);
      }
      const key = resolutionKey(subject, state, fk);
      const id = `${subject.kind} ${subject.account}`;
      const known = cur.get(id) ?? prev.get(id);
      const resolution = known && known.key === key ? known.resolution : resolveSubject(subject, state);
      cur.set(id, { key, resolution });
      return resolution;
    },
    endPass() {
      prev = cur;
      cur = new Map();
    },
  };
}
