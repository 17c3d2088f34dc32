import type { Command } from 'commander';
import { loadConfig } from '../config/load.js';
import { EXIT, isLeashError } from '../errors.js';
import { storeFindings } from '../policy/validate.js';
import { configPath, formatFinding, print, printJson } from './context.js';
import { stateDirOf } from './policy-common.js';

export function register(program: Command): void {
  program
    .command('validate')
    .description("load and validate the config with the service's own loader; exit 1 on a critical finding")
    .option('--json', 'print the result as JSON')
    .action((opts: { json?: boolean }, cmd: Command) => {
      const file = configPath(cmd);
      let loaded;
      try {
        loaded = loadConfig(file);
      } catch (e) {
        if (opts.json && isLeashError(e)) {
          printJson({ valid: false, config: file, ...e.toJSON() });
          process.exitCode = e.exitCode;
          return;
        }
        throw e;
      }
      // The policy store (profiles, bindings, acks) is judged with the same floor; nothing when absent.
      const store = storeFindings(loaded.config, stateDirOf({}));
      const critical = [...loaded.findings, ...store].filter((f) => f.severity === 'critical');
      if (opts.json) {
        printJson({
          valid: critical.length === 0,
          config: file,
          findings: loaded.findings,
          inert_entries: loaded.inert,
          policy_store: store,
        });
      } else {
        for (const f of loaded.findings) print(formatFinding(f));
        for (const f of store) print(`${f.severity} ${f.code} ${f.path}: ${f.message}`);
        print(
          critical.length
            ? `${file}: ${critical.length} critical finding(s)`
            : `${file}: valid${loaded.warnings.length ? ` (${loaded.warnings.length} warning(s))` : ''}`,
        );
      }
      if (critical.length) process.exitCode = EXIT.verdict;
    });
}
