import type { Command } from 'commander';
import { loadConfig } from '../config/load.js';
import { SURFACES } from '../engine/types.js';
import { systemLoaders } from '../enforcers/fs/loaders.js';
import { configPath, print, printJson } from './context.js';

export function register(program: Command): void {
  program
    .command('status')
    .description("print the user, each surface's mode and list sizes, enforcer toggles and the decision sink")
    .option('--json', 'print the status as JSON')
    .action((opts: { json?: boolean }, cmd: Command) => {
      const file = configPath(cmd);
      const { config, account, findings } = loadConfig(file);
      // Commands ride the filesystem watcher (one fanotify daemon), so they share its toggle.
      const enforced = {
        network: config.enforcers.network,
        filesystem: config.enforcers.filesystem,
        commands: config.enforcers.filesystem,
        tools: config.enforcers.tools,
      };
      const surfaces = Object.fromEntries(
        SURFACES.map((s) => [
          s,
          { mode: config[s].mode, allow: config[s].allow.length, deny: config[s].deny.length, enforced: enforced[s] },
        ]),
      );
      // What the watcher implies for an allowed program (commands.interpreters, or the system's loaders).
      const interpreters = {
        source: config.commands.interpreters ? 'config' : 'system_loaders',
        entries: config.commands.interpreters ?? systemLoaders(),
      };
      const counts = {
        critical: findings.filter((f) => f.severity === 'critical').length,
        warning: findings.filter((f) => f.severity === 'warning').length,
      };
      if (opts.json) {
        printJson({
          config: file,
          user: config.user,
          uid: account?.uid ?? null,
          fail_mode: config.fail_mode,
          surfaces,
          interpreters,
          enforcers: config.enforcers,
          decisions: config.logging.decisions,
          findings: counts,
        });
        return;
      }
      print(`config     ${file}`);
      print(
        `user       ${config.user ?? '(none: run leash init --user NAME)'}${account ? ` (uid ${account.uid})` : config.user ? ' (no such account)' : ''}`,
      );
      print(`fail_mode  ${config.fail_mode}`);
      for (const s of SURFACES) {
        const v = surfaces[s]!;
        print(
          `${s.padEnd(10)} ${v.mode.padEnd(9)}  allow ${String(v.allow).padStart(4)}  deny ${String(v.deny).padStart(4)}  enforcer ${v.enforced ? 'on' : 'OFF (not enforced)'}`,
        );
      }
      print(
        `interpreters ${interpreters.source === 'config' ? '(commands.interpreters)' : '(system dynamic loaders)'} ${interpreters.entries.join(' ') || '(none)'}`,
      );
      print(`decisions  ${config.logging.decisions}`);
      if (counts.critical || counts.warning) {
        print(`findings   ${counts.critical} critical, ${counts.warning} warning (run: leash validate)`);
      }
    });
}
