import type { Command } from 'commander';
import type { Config } from '../control/config/types.js';
import { LeashError } from '../errors.js';
import type { Effective } from '../control/policy/fragment.js';
import type { Resolution, Sources, SubjectFailure } from '../control/policy/resolve.js';
import { resolveSubject } from '../control/policy/resolve.js';
import { loadPolicyState } from '../control/policy/state.js';
import type { Subject } from '../control/subjects/discovery.js';
import { defaultPasswdSource, discoverFrom, readPasswd } from '../control/subjects/discovery.js';
import { stateDirOf } from './policy-common.js';

/** What `check` and `status` judge against: one subject's policy, resolved as the service resolves it. */
export interface SubjectView {
  /** The account judged for, or null when the config names no user and --subject was not given. */
  account: string | null;
  kind: Subject['kind'];
  resolution: Resolution;
}

/** `--subject ACCOUNT` and `--state-dir DIR` for the dry-run commands. */
export function subjectOptions(cmd: Command): Command {
  return cmd
    .option('--subject <account>', 'judge for this account: floor + global + its agent binding (default: the user)')
    .option('--state-dir <dir>', 'policy state directory with profiles and bindings (env LEASH_STATE_DIR)');
}

/**
 * Resolves the subject a dry run is for, through the service's own resolver (floor, then the global
 * binding, then the account's agent binding). Without --subject it is the configured user, who has
 * no tier of its own, so passwd is not read. A named account must exist and be one the service confines.
 */
export function subjectView(config: Config, opts: { subject?: string; stateDir?: string }): SubjectView {
  const state = loadPolicyState(config, stateDirOf(opts));
  const named = opts.subject;
  if (named === undefined || named === config.user) {
    const account = named ?? config.user;
    return {
      account,
      kind: 'user',
      resolution: resolveSubject({ kind: 'user', account: account ?? '', uid: -1 }, state),
    };
  }
  const entries = readPasswd(defaultPasswdSource());
  if (!entries.some((e) => e.name === named)) {
    throw new LeashError('subject_unknown', `--subject ${named}: no such account on this host`, { subject: named });
  }
  const s = discoverFrom(entries, config.user).subjects.find((x) => x.account === named);
  if (!s) {
    throw new LeashError(
      'subject_not_leashed',
      `--subject ${named}: the service does not confine this account (it is neither the configured user nor a leash-* account)`,
      { subject: named },
    );
  }
  return { account: s.account, kind: s.kind, resolution: resolveSubject(s, state) };
}

/** The layer a surface's list (or mode) came from, e.g. `floor` or `agent:leash-iris=web`. */
export function layerOf(sources: Sources, section: string, key: string): string {
  return sources[`${section}.${key}`] ?? 'floor';
}

export type { Effective, SubjectFailure };
