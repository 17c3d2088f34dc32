import type { Command } from 'commander';
import { addEntry, checkEntry, editConfig, entriesOf, removeEntry, setMode } from '../control/config/write.js';
import { LeashError } from '../errors.js';
import { SURFACES, type Mode, type Surface } from '../engine/types.js';
import { configPath, formatFinding, print, printJson, SHORT, warn } from './context.js';
import { signalService } from './reconcile.js';

const LIST_VERB = { allow: 'allowed', deny: 'denied' } as const;

export function register(program: Command): void {
  for (const surface of SURFACES) {
    const group = program
      .command(surface)
      .alias(SHORT[surface])
      .description(`edit the ${surface} policy (alias: ${SHORT[surface]})`);

    for (const list of ['allow', 'deny'] as const) {
      group
        .command(`${list} <entry>`)
        .description(`add an entry to ${surface}.${list}; an entry that can never match is refused`)
        .option('--json', 'print the result as JSON')
        .option('--no-reconcile', 'do not signal the running service to reload')
        .action(async (entry: string, opts: { json?: boolean; reconcile: boolean }, cmd: Command) => {
          const file = configPath(cmd);
          checkEntry(surface, list, entry);
          let added = false;
          const { loaded } = await editConfig(file, (doc, current) => {
            // A blacklist never consults its allow list: the entry would read as a grant and do nothing.
            if (list === 'allow' && current?.config[surface].mode === 'blacklist') {
              throw new LeashError(
                'entry_inert',
                `${surface} allow entry ${JSON.stringify(entry)}: ${surface} is in blacklist mode (default-allow), which never consults its allow list; nothing written (to allow only listed entries: leash ${SHORT[surface]} mode whitelist)`,
                { kind: 'entry', inert_entries: [{ surface, list, entry, problem: null, severity: 'critical' }] },
              );
            }
            added = addEntry(doc, surface, list, entry);
          });
          const related = loaded.findings.filter((f) => f.path.startsWith(`${surface}.`));
          const service = added && opts.reconcile ? signalService() : { signalled: false, reason: 'no change' };
          if (opts.json) {
            printJson({ surface, list, entry, added, config: file, findings: related, service });
            return;
          }
          print(`${surface}: ${added ? LIST_VERB[list] : `already ${LIST_VERB[list]}`} ${entry}`);
          for (const f of related) warn(formatFinding(f));
          if (service.signalled) print('leash.service told to reload (SIGHUP)');
        });
    }

    group
      .command('remove <list> <entry>')
      .description(`remove an entry from ${surface}.allow or ${surface}.deny, exactly as it is written`)
      .option('--json', 'print the result as JSON')
      .option('--no-reconcile', 'do not signal the running service to reload')
      .action(async (list: string, entry: string, opts: { json?: boolean; reconcile: boolean }, cmd: Command) => {
        if (list !== 'allow' && list !== 'deny') {
          throw new LeashError('usage', `leash ${surface} remove takes allow or deny, not "${list}"`, { list });
        }
        const file = configPath(cmd);
        let removed = 0;
        const { loaded } = await editConfig(file, (doc) => {
          removed = removeEntry(doc, surface, list, entry);
          if (removed === 0) {
            // Nothing to write: a typo must not look like a successful removal.
            const have = entriesOf(doc, surface, list);
            const near = have.filter((e) => e.toLowerCase() === entry.toLowerCase() || e.includes(entry)).slice(0, 3);
            throw new LeashError(
              'entry_not_found',
              `${surface}.${list} has no entry ${JSON.stringify(entry)}` +
                (near.length ? ` (did you mean ${near.map((e) => JSON.stringify(e)).join(', ')}?)` : ''),
              { surface, list, entry, entries: have },
            );
          }
        });
        const related = loaded.findings.filter((f) => f.path.startsWith(`${surface}.`));
        const service = opts.reconcile ? signalService() : { signalled: false, reason: 'no change' };
        if (opts.json) {
          printJson({ surface, list, entry, removed, config: file, findings: related, service });
          return;
        }
        print(`${surface}: no longer ${LIST_VERB[list]} ${entry}`);
        for (const f of related) warn(formatFinding(f));
        if (service.signalled) print('leash.service told to reload (SIGHUP)');
      });

    group
      .command('mode <mode>')
      .description(`set ${surface}.mode: whitelist (default-deny) or blacklist (default-allow)`)
      .option('--json', 'print the result as JSON')
      .option('--no-reconcile', 'do not signal the running service to reload')
      .action(async (mode: string, opts: { json?: boolean; reconcile: boolean }, cmd: Command) => {
        if (mode !== 'whitelist' && mode !== 'blacklist') {
          throw new LeashError('mode_invalid', `mode must be whitelist or blacklist, not "${mode}"`, { mode });
        }
        const file = configPath(cmd);
        let changed = false;
        const { loaded } = await editConfig(file, (doc) => {
          changed = setMode(doc, surface as Surface, mode as Mode);
        });
        const related = loaded.findings.filter((f) => f.path.startsWith(`${surface}.`));
        const service = changed && opts.reconcile ? signalService() : { signalled: false, reason: 'no change' };
        if (opts.json) {
          printJson({ surface, mode, changed, config: file, findings: related, service });
          return;
        }
        print(`${surface}: mode ${changed ? 'set to' : 'already'} ${mode}`);
        for (const f of related) warn(formatFinding(f));
        if (service.signalled) print('leash.service told to reload (SIGHUP)');
      });
  }
}
