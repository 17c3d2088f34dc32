import { LeashError } from '../../../errors.js';
import type { ApplyOutcome } from './apply.js';
import { dispatchComment, validate, type SubjectRules } from './render.js';
import type { Runner } from './run.js';

// iptables fallback: IPv4 TCP for ONE UID (loopback included, as with nft). It appends into the built-in nat OUTPUT chain, which cannot express a
// per-UID dispatch, so several subjects are refused rather than one policy silently applied to all.

/** The `iptables -S` lines the fallback keeps in nat OUTPUT for one subject (the exact canonical form). */
export function renderIptables(s: SubjectRules): string[] {
  validate(s);
  // nat OUTPUT cannot refuse (REJECT is the filter table's): the fallback has no sealed form.
  if (s.sealed) throw new LeashError('network_rule_invalid', 'the iptables fallback cannot seal a subject');
  const c = `-m comment --comment "${dispatchComment(s.uid)}"`;
  return [`-A OUTPUT -p tcp -m owner --uid-owner ${s.uid} ${c} -j REDIRECT --to-ports ${s.port}`];
}

export async function iptablesLeashLines(runner: Runner): Promise<string[]> {
  const res = await runner(['iptables', '-w', '-t', 'nat', '-S', 'OUTPUT']);
  if (res.code !== 0)
    throw new LeashError('iptables_failed', `iptables -S failed: ${res.stderr.trim()}`, { stderr: res.stderr.trim() });
  return res.stdout.split('\n').filter((l) => /--comment "?leash:\d+"?/.test(l));
}

async function iptablesRestore(runner: Runner, lines: string[]): Promise<void> {
  if (!lines.length) return;
  const res = await runner(['iptables-restore', '-w', '--noflush'], `*nat\n${lines.join('\n')}\nCOMMIT\n`);
  if (res.code !== 0)
    throw new LeashError('iptables_failed', `iptables-restore failed: ${res.stderr.trim()}`, {
      stderr: res.stderr.trim(),
    });
}

/** Applies the single subject with iptables; one transaction (iptables-restore --noflush). */
export async function applyIptables(runner: Runner, s: SubjectRules): Promise<ApplyOutcome> {
  const want = renderIptables(s);
  const have = await iptablesLeashLines(runner);
  const others = have.filter((l) => !l.includes(`"${dispatchComment(s.uid)}"`) && !l.endsWith(dispatchComment(s.uid)));
  if (others.length) throw new LeashError('iptables_single_subject', 'the iptables fallback holds one subject only');
  if (have.length === want.length && have.every((l, i) => l === want[i])) return 'unchanged';
  await iptablesRestore(runner, [...have.map((l) => l.replace(/^-A /, '-D ')), ...want]);
  return have.length ? 'changed' : 'added';
}

export async function releaseIptables(runner: Runner, uids: number[]): Promise<void> {
  const have = await iptablesLeashLines(runner);
  const mine = have.filter((l) => uids.some((u) => l.includes(`"${dispatchComment(u)}"`)));
  await iptablesRestore(
    runner,
    mine.map((l) => l.replace(/^-A /, '-D ')),
  );
}
