import { LeashError } from '../../../errors.js';
import { applyEach, applySubject, applySubjects, nftAvailable, releaseSubjects, type ApplyOutcome } from './apply.js';
import { applyIptables, iptablesLeashLines, releaseIptables } from './iptables.js';
import { appliedUids, readState } from './read.js';
import type { SubjectRules } from './render.js';
import type { Runner } from './run.js';

export type Backend = 'nft' | 'iptables';

export interface Firewall {
  readonly backend: Backend;
  apply(s: SubjectRules): Promise<ApplyOutcome>;
  /** Many subjects in one transaction when the backend can (see applySubjects); per-subject results. */
  applyMany(list: SubjectRules[]): Promise<Map<number, ApplyOutcome | Error>>;
  release(uids: number[]): Promise<void>;
  /** UIDs currently holding rules. */
  applied(): Promise<number[]>;
}

export interface FirewallOptions {
  runner: Runner;
  /** How many subjects the caller will apply; the iptables fallback refuses more than one. */
  subjects: number;
  /** Where the fallback's notice goes (stderr by default). */
  warn?: (msg: string) => void;
}

/**
 * Picks nft, or the iptables fallback when nft cannot be run (saying so: it covers IPv4 TCP only, no IPv6, no UDP
 * filter). With several subjects and no nft it refuses rather than apply one subject's redirect to all.
 */
export async function openFirewall(opts: FirewallOptions): Promise<Firewall> {
  const warn = opts.warn ?? ((m: string) => process.stderr.write(m + '\n'));
  const { runner } = opts;
  if (await nftAvailable(runner)) {
    return {
      backend: 'nft',
      apply: (s) => applySubject(runner, s),
      applyMany: (list) => applySubjects(runner, list),
      release: (uids) => releaseSubjects(runner, uids),
      applied: async () => appliedUids(await readState(runner)),
    };
  }
  if (opts.subjects > 1)
    throw new LeashError(
      'nft_missing_multi',
      `nft is not available and ${opts.subjects} subjects are configured: the iptables fallback enforces one UID only; install nftables`,
    );
  warn('leash: nft not found; iptables fallback: IPv4 TCP only for one UID (no IPv6 redirect, no UDP filter)');
  return {
    backend: 'iptables',
    apply: (s) => applyIptables(runner, s),
    applyMany: (list) => applyEach(list, (s) => applyIptables(runner, s)),
    release: (uids) => releaseIptables(runner, uids),
    applied: async () =>
      [...new Set((await iptablesLeashLines(runner)).map((l) => Number(/leash:(\d+)/.exec(l)?.[1] ?? NaN)))].filter(
        (n) => Number.isInteger(n),
      ),
  };
}
