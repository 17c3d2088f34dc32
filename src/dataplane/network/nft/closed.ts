/**
 * The closed data plane: what holds a subject when no service is there to judge for it (a crash, a start that
 * failed). Its nft chain redirects its TCP and DNS to ports where nothing listens, so a connection is refused and a
 * query unanswered until a service opens the listeners again; everything else it sends is dropped by the same chain.
 * A UID that still holds the last good chain keeps it untouched (a crash leaves the chains in place: `leash teardown`
 * releases them only after a deliberate stop).
 */
import { openFirewall } from './firewall.js';
import type { SubjectRules } from './render.js';
import type { Runner } from './run.js';

export interface ClosedOutcome {
  /** UIDs that already held a chain (the last good data plane), left as they were. */
  kept: number[];
  /** UIDs given a closed chain now. */
  closed: number[];
  /** UIDs that could not be closed, with why. */
  failed: { uid: number; message: string }[];
}

/** Puts every UID of `subjects` that holds no chain behind a closed one (its redirect finds no listener). */
export async function holdClosed(runner: Runner, subjects: readonly SubjectRules[]): Promise<ClosedOutcome> {
  const fw = await openFirewall({ runner, subjects: Math.max(1, subjects.length), warn: () => {} });
  const present = new Set(await fw.applied());
  const missing = subjects.filter((s) => !present.has(s.uid));
  const out: ClosedOutcome = {
    kept: subjects.filter((s) => present.has(s.uid)).map((s) => s.uid),
    closed: [],
    failed: [],
  };
  if (missing.length === 0) return out;
  for (const [uid, r] of await fw.applyMany(missing)) {
    if (r instanceof Error) out.failed.push({ uid, message: r.message });
    else out.closed.push(uid);
  }
  return out;
}

/**
 * What ExecStopPost's teardown does for a given `$SERVICE_RESULT` (systemd.exec(5)): `success` is a deliberate stop
 * (or a clean exit) and releases everything; anything else (`signal`, `exit-code`, `core-dump`, `watchdog`,
 * `timeout`, ...) is a crash or a failed start, after which the chains are kept: the agents stay confined closed
 * until the next start takes them over in place.
 */
export function keepsChainsAfter(serviceResult: string | undefined): boolean {
  return serviceResult !== undefined && serviceResult !== '' && serviceResult !== 'success';
}
