import fs from 'node:fs';
import { FINDING_CODES, type FindingCode, type Severity } from '../../errors.js';
import { finding, type Finding } from '../config/load.js';
import type { Config } from '../config/types.js';
import { fsCmdPolicyOf, markCoverage, parseMountinfo } from '../../dataplane/watcher/index.js';
import type { Discovery } from '../subjects/discovery.js';
import { discover } from '../subjects/discovery.js';
import type { Binding, Scope } from './bindings.js';
import { readBindings } from './bindings.js';
import { listBindings } from './commands.js';
import { bindingFindings } from './consent.js';
import type { Effective } from './fragment.js';
import { floorOf } from './fragment.js';
import { inertInFragment } from './inert.js';
import { listProfiles, profileLoader } from './profiles.js';
import { resolveSubject } from './resolve.js';

/** One thing `leash validate` reports about the policy store (same shape as the config's findings). */
export interface StoreFinding {
  code: FindingCode;
  severity: Severity;
  path: string;
  message: string;
  entry?: string;
}

function f(code: FindingCode, path: string, message: string, entry?: string): StoreFinding {
  return { code, severity: FINDING_CODES[code], path, message, ...(entry !== undefined ? { entry } : {}) };
}

/**
 * The policy store's part of `leash validate`: inert entries in every profile (an inert deny is
 * critical), broken profiles, dangling bindings, bindings that resolve for nobody, stale acks
 * (consent to a loosening the profile no longer performs: left by a crash between the two
 * renames of a profile save, or by an edit that tightened), and subjects that will not resolve.
 * A host without a state directory has nothing to report.
 */
export function validateStore(stateDir: string, floor: Effective, discovery: Discovery): StoreFinding[] {
  if (!fs.existsSync(stateDir)) return [];
  const out: StoreFinding[] = [];
  const loader = profileLoader(stateDir);
  for (const name of listProfiles(stateDir)) {
    const st = loader(name);
    if (st.status === 'broken') {
      out.push(f('profile_broken', `profiles/${name}.yaml`, st.message));
      continue;
    }
    if (st.status !== 'ok') continue;
    for (const i of inertInFragment(st.fragment, floor)) {
      const code: FindingCode =
        i.severity === 'critical'
          ? i.path.includes('.deny')
            ? 'inert_deny'
            : 'blacklist_allow_ignored'
          : 'inert_allow';
      out.push(f(code, `profiles/${name}.yaml:${i.path}`, `${i.entry}: ${i.why}`, i.entry));
    }
  }
  const bindings = readBindings(stateDir);
  const state = { floor, bindings, profile: loader };
  for (const v of listBindings({ stateDir, floor, discovery, configuredUser: null })) {
    const at = `bindings.yaml:${v.scope}`;
    if (v.profileStatus === 'missing') {
      out.push(
        f(
          'binding_dangling',
          at,
          `profile ${v.profile} does not exist: the binding holds its subjects fail-closed (unbind needs fail_closed:${v.profile})`,
        ),
      );
    }
    if (v.subjects.length === 0) out.push(f('binding_for_nobody', at, `${v.scope} resolves for no discovered subject`));
    const st = loader(v.profile);
    if (st.status !== 'ok') continue;
    const b = bindings.bindings[v.scope as Scope] as Binding;
    const live = new Set(bindingFindings(v.scope as Scope, st.fragment, state).map((x) => x.token));
    for (const ack of b.acks) {
      if (!live.has(ack))
        out.push(f('ack_stale', at, `ack ${ack} consents to a loosening ${v.profile} no longer performs`, ack));
    }
  }
  for (const s of discovery.subjects) {
    const r = resolveSubject(s, state);
    if (!r.ok)
      out.push(
        f(
          'subject_unresolvable',
          `subject:${s.account}`,
          `${s.account} fails alone (denied everything): ${r.failure.message}`,
        ),
      );
  }
  const rank = (s: Severity) => (s === 'critical' ? 0 : 1);
  return out.sort((a, b) => rank(a.severity) - rank(b.severity));
}

/**
 * `leash validate`'s call: the store judged against a loaded config's floor and passwd
 * (LEASH_PASSWD in tests). A host without a state directory (single-subject) has nothing to report.
 */
export function storeFindings(config: Config, stateDir: string): StoreFinding[] {
  if (!fs.existsSync(stateDir)) return [];
  return validateStore(stateDir, floorOf(config), discover(config.user));
}

/**
 * What `leash validate` says about the marks the watcher would put on this host: a filesystem or
 * commands whitelist judges only filesystems that are marked (those holding the policy's paths,
 * plus `filesystem.watch`), so opens and execs elsewhere pass unjudged. Host-dependent, so it is
 * not part of `parseConfig` (the service and a profile write judge the policy, not the mounts).
 * `mountinfo` is the text of /proc/self/mountinfo.
 */
export function coverageFindings(config: Config, mountinfo: string): Finding[] {
  if (!config.enforcers.filesystem) return [];
  const warnings = markCoverage({
    policy: fsCmdPolicyOf(config),
    watch: config.filesystem.watch,
    mounts: parseMountinfo(mountinfo),
  });
  return warnings.map((w) => ({
    ...finding('marks_partial_coverage', `${w.surface}.mode`, w.message),
    unmarked: w.unmarked,
  }));
}
