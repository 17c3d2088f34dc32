import type { Command } from 'commander';
import { bind, listBindings, unbind } from '../control/policy/commands.js';
import { LeashError } from '../errors.js';
import { impactLines, loadContext, policyOptions, run } from './policy-common.js';
import { afterWrite } from './reload.js';
import { registerProfileCommands } from './profile.js';

/** Registers `profile`, `bind`, `unbind` and `bindings` on the leash program. */
export function registerPolicyCommands(program: Command): void {
  registerProfileCommands(program);

  const b = program
    .command('bind <scope> <profile>')
    .description('attach a profile to global or agent:<account>; a loosening needs --ack per finding')
    .option(
      '--enforce <mode>',
      "enforce (block) or shadow (log would_block, block nothing); wins over the profile's enforce",
    );
  policyOptions(b, { write: true, ack: true }).action(
    async (scope: string, profile: string, _o: unknown, cmd: Command) =>
      run(cmd, async (o) => {
        const ctx = loadContext(o);
        const r = await bind(
          ctx,
          scope,
          profile,
          o.ack ?? [],
          enforceOption(cmd.opts<{ enforce?: unknown }>().enforce),
        );
        const lines = [`bound ${r.scope} -> ${r.profile}${r.replaced ? ` (was ${r.replaced})` : ''}`];
        if (r.enforce === 'shadow')
          lines.push('shadow: nothing is blocked for it; would-be blocks are logged as would_block (no protection)');
        if (r.scope === 'global') {
          lines.push(
            `global: this changes the floor for every subject on this host (${ctx.discovery.subjects.length} now)`,
          );
        }
        if (r.acks.length) lines.push(`consent recorded: ${r.acks.join(', ')}`);
        if (r.ignoredAcks.length) lines.push(`ignored (nothing to consent to): ${r.ignoredAcks.join(', ')}`);
        lines.push(...impactLines(r.impact));
        afterWrite(
          o,
          {
            scope: r.scope,
            profile: r.profile,
            replaced: r.replaced,
            enforce: r.enforce,
            acks: r.acks,
            findings: r.findings.map((f) => f.token),
            floor_changed: r.scope === 'global',
            impact: r.impact,
          },
          lines,
        );
      }),
  );

  const u = program
    .command('unbind <scope>')
    .description('remove a binding; a removal that loosens needs --ack per finding, recorded in unbinds.jsonl first');
  policyOptions(u, { write: true, ack: true }).action(async (scope: string, _o: unknown, cmd: Command) =>
    run(cmd, async (o) => {
      const ctx = loadContext(o);
      const r = await unbind(ctx, scope, o.ack ?? []);
      const lines = [`unbound ${r.scope} (was ${r.profile})`];
      if (r.findings.length)
        lines.push(`consent recorded in unbinds.jsonl: ${r.findings.map((f) => f.token).join(', ')}`);
      if (r.scope === 'global') lines.push('global: this changes the floor for every subject on this host');
      lines.push(...impactLines(r.impact));
      afterWrite(
        o,
        { scope: r.scope, profile: r.profile, findings: r.findings.map((f) => f.token), impact: r.impact },
        lines,
      );
    }),
  );

  const l = program.command('bindings').description('list bindings, their acks, and whom each resolves for');
  policyOptions(l, { write: false, ack: false }).action((_o: unknown, cmd: Command) =>
    run(cmd, (o) => {
      const ctx = loadContext(o);
      const rows = listBindings(ctx);
      if (o.json) {
        process.stdout.write(`${JSON.stringify({ bindings: rows })}\n`);
        return;
      }
      if (!rows.length) {
        process.stdout.write('no bindings (every subject resolves to the floor)\n');
        return;
      }
      const out = rows.map((r) => {
        const status =
          r.profileStatus === 'ok'
            ? ''
            : ` [${r.profileStatus === 'missing' ? 'DANGLING: fail-closed' : 'BROKEN: fail-closed'}]`;
        const who = r.scope === 'global' ? 'every subject' : r.subjects.join(',') || 'nobody';
        const mode = r.enforce === 'shadow' ? ' [SHADOW: nothing blocked]' : '';
        return `${r.scope}\t${r.profile}${status}${mode}\tfor: ${who}\tacks: ${r.acks.join(', ') || '-'}`;
      });
      process.stdout.write(`${out.join('\n')}\n`);
    }),
  );
}

/** `--enforce`: enforce or shadow, anything else is `usage` (exit 2). */
function enforceOption(v: unknown): 'enforce' | 'shadow' | undefined {
  if (v === undefined) return undefined;
  if (v === 'enforce' || v === 'shadow') return v;
  throw new LeashError('usage', `--enforce must be enforce or shadow, not ${JSON.stringify(v)}`, { option: 'enforce' });
}
