import type { Command } from 'commander';
import { readPolicyFile } from '../formats/yaml.js';
import { LeashError } from '../errors.js';
import type { Binding, Scope } from '../control/policy/bindings.js';
import { readBindings } from '../control/policy/bindings.js';
import { deleteProfile, saveProfile } from '../control/policy/commands.js';
import { checkProfileName, listProfiles, loadProfile } from '../control/policy/profiles.js';
import { impactLines, loadContext, policyOptions, run, stateDirOf } from './policy-common.js';
import { afterWrite } from './reload.js';

function boundTo(stateDir: string, name: string): Scope[] {
  return (Object.entries(readBindings(stateDir).bindings) as [Scope, Binding][])
    .filter(([, b]) => b.profile === name)
    .map(([s]) => s);
}

/** `leash profile save|list|show|delete`: the profile library under /var/lib/leash/profiles. */
export function registerProfileCommands(program: Command): void {
  const profile = program
    .command('profile')
    .description('named policy fragments (/var/lib/leash/profiles/<name>.yaml)');

  const save = profile
    .command('save <name>')
    .description('save a profile from a fragment file; re-judges every binding that names it')
    .requiredOption('--from <file>', 'the fragment: only the keys it means to set');
  policyOptions(save, { write: true, ack: true }).action(async (name: string, _o: unknown, cmd: Command) =>
    run(cmd, async (o) => {
      checkProfileName(name);
      const file = (o as { from?: string } & typeof o).from as string;
      // The strict reader: bounded, UTF-8 or refused (config_encoding), never U+FFFD.
      const text = readPolicyFile(file, {
        what: 'fragment file (--from)',
        hint: 'write the keys the profile sets, e.g. network: { allow: [api.example.com] }',
      });
      const ctx = loadContext(o);
      const r = await saveProfile(ctx, name, text, file, o.ack ?? []);
      const lines = [`profile ${name} ${r.created ? 'created' : 'saved'} (sha256 ${r.hash.slice(0, 12)})`];
      if (r.boundTo.length) lines.push(`bound to: ${r.boundTo.join(', ')}`);
      for (const [a, t] of Object.entries(r.acksAdded)) lines.push(`consent recorded on agent:${a}: ${t.join(', ')}`);
      lines.push(...impactLines(r.impact));
      afterWrite(
        o,
        {
          profile: name,
          created: r.created,
          hash: r.hash,
          bound_to: r.boundTo,
          acks_added: r.acksAdded,
          impact: r.impact,
        },
        lines,
      );
    }),
  );

  const list = profile.command('list').description('list saved profiles and what they are bound to');
  policyOptions(list, { write: false, ack: false }).action((_o: unknown, cmd: Command) =>
    run(cmd, (o) => {
      const dir = stateDirOf(o);
      const rows = listProfiles(dir).map((name) => {
        const st = loadProfile(dir, name);
        return { name, status: st.status, hash: st.status === 'ok' ? st.hash : null, bound_to: boundTo(dir, name) };
      });
      if (o.json) process.stdout.write(`${JSON.stringify({ profiles: rows })}\n`);
      else if (!rows.length) process.stdout.write('no profiles\n');
      else
        process.stdout.write(
          `${rows.map((r) => `${r.name}\t${r.status === 'ok' ? (r.hash ?? '').slice(0, 12) : r.status}\t${r.bound_to.join(',') || '-'}`).join('\n')}\n`,
        );
    }),
  );

  const show = profile.command('show <name>').description('print a profile and its bindings');
  policyOptions(show, { write: false, ack: false }).action((name: string, _o: unknown, cmd: Command) =>
    run(cmd, (o) => {
      const dir = stateDirOf(o);
      const st = loadProfile(dir, name);
      if (st.status === 'missing') throw new LeashError('profile_not_found', `no profile ${name}`, { profile: name });
      if (st.status === 'broken') throw new LeashError('profile_invalid', st.message, { profile: name });
      const bound = boundTo(dir, name);
      if (o.json)
        process.stdout.write(`${JSON.stringify({ name, hash: st.hash, fragment: st.fragment, bound_to: bound })}\n`);
      else
        process.stdout.write(
          `# profile ${name} (sha256 ${st.hash.slice(0, 12)}), bound to: ${bound.join(', ') || 'nothing'}\n${st.text}`,
        );
    }),
  );

  const del = profile
    .command('delete <name>')
    .description('delete a profile (a binding naming it then holds its agent fail-closed)');
  policyOptions(del, { write: true, ack: false }).action(async (name: string, _o: unknown, cmd: Command) =>
    run(cmd, async (o) => {
      const ctx = loadContext(o);
      const r = await deleteProfile(ctx, name);
      const lines = [`profile ${name} deleted`];
      for (const s of r.dangling)
        lines.push(
          `warning: ${s} now dangles and holds its subjects fail-closed (leash unbind ${s} --ack 'fail_closed:${name}')`,
        );
      lines.push(...impactLines(r.impact));
      afterWrite(o, { profile: name, deleted: true, dangling: r.dangling, impact: r.impact }, lines);
    }),
  );
}
