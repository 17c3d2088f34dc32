/**
 * `leash apply -f DIR [--dry-run]`: the host's profiles and bindings made exactly those in DIR
 * (src/control/policy/apply.ts). Exit codes for configuration management, an exception to the CLI's table
 * (docs/cli.md): 0 nothing changed, 2 changed, 1 refused (any refusal: DIR, consent, usage);
 * 3 an operation failed, 70 a bug, as everywhere.
 */
import type { Command } from 'commander';
import { EXIT, isLeashError } from '../errors.js';
import type { ApplyResult } from '../control/policy/apply.js';
import { applyDir, readApplyDir } from '../control/policy/apply.js';
import { loadContext, policyOptions, report, type PolicyOpts } from './policy-common.js';
import { reloadService, type ReloadOutcome } from './reload.js';

export const APPLY_EXIT = { unchanged: 0, refused: 1, changed: 2 } as const;

/** The CLI's exit status mapped for apply: a refusal (2 elsewhere) is 1, so 2 can mean "changed". */
export function applyExit(code: number): number {
  return code === EXIT.refused ? APPLY_EXIT.refused : code;
}

function textLines(r: ApplyResult, dir: string): string[] {
  const out: string[] = [];
  const p = r.profiles;
  const b = r.bindings;
  for (const n of p.added) out.push(`+ profile ${n}`);
  for (const c of p.changed) {
    out.push(`~ profile ${c.name}`);
    for (const l of c.diff) if (!l.startsWith('  ')) out.push(`    ${l}`);
  }
  for (const n of p.removed) out.push(`- profile ${n}`);
  for (const x of b.added)
    out.push(`+ bind ${x.scope} -> ${x.profile}${x.acks.length ? ` (acks: ${x.acks.join(', ')})` : ''}`);
  for (const x of b.changed)
    out.push(
      `~ bind ${x.scope}: ${x.from.profile} [${x.from.acks.join(', ')}] -> ${x.to.profile} [${x.to.acks.join(', ')}]`,
    );
  for (const x of b.removed) out.push(`- bind ${x.scope} (was ${x.profile})`);
  for (const f of r.findings)
    out.push(
      `finding ${f.scope} ${f.token} (${f.acked === 'binding' ? 'acked by its binding' : 'acked in acks:'}): ${f.words}`,
    );
  for (const w of r.warnings) out.push(`warning: ${w}`);
  if (r.ignoredAcks.length) out.push(`ignored (nothing to consent to): ${r.ignoredAcks.join(', ')}`);
  if (!r.changed) out.push(`${dir}: unchanged`);
  else out.push(r.dryRun ? `${dir}: would change (dry run, nothing written)` : `${dir}: applied`);
  return out;
}

export function register(program: Command): void {
  const cmd = program
    .command('apply')
    .description('make the profiles and bindings exactly those in DIR (exit 0 unchanged, 2 changed, 1 refused)')
    .requiredOption('-f, --file <dir>', 'the directory: profiles/<name>.yaml and bindings.yaml (docs/cli.md)')
    .option('--dry-run', 'print the diff and the findings; write nothing');
  policyOptions(cmd, { write: true, ack: false }).action(async (_o: unknown, c: Command) => {
    const o = c.optsWithGlobals() as PolicyOpts & { file: string; dryRun?: boolean };
    try {
      const ctx = loadContext(o);
      const d = readApplyDir(o.file, ctx);
      const r = await applyDir(ctx, d, { dryRun: o.dryRun === true });
      let reconcile: ReloadOutcome | { sent: false; why: string } = { sent: false, why: 'nothing changed' };
      if (r.changed && r.dryRun) reconcile = { sent: false, why: 'dry run' };
      else if (r.changed)
        reconcile = o.reconcile === false ? { sent: false, why: 'skipped (--no-reconcile)' } : reloadService();
      if (o.json)
        process.stdout.write(`${JSON.stringify({ ok: true, dir: o.file, dry_run: r.dryRun, ...r, reconcile })}\n`);
      else {
        const lines = textLines(r, o.file);
        if (r.changed && !r.dryRun)
          lines.push(
            reconcile.sent ? `reconcile: signalled the service (${reconcile.via})` : `reconcile: ${reconcile.why}`,
          );
        process.stdout.write(`${lines.join('\n')}\n`);
      }
      process.exitCode = r.changed ? APPLY_EXIT.changed : APPLY_EXIT.unchanged;
    } catch (e) {
      report(e, o);
      if (isLeashError(e) || typeof process.exitCode === 'number')
        process.exitCode = applyExit(Number(process.exitCode));
    }
  });
}
