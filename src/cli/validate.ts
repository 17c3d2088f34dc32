import type { Command } from 'commander';
import fs from 'node:fs';
import { loadConfig, type Finding } from '../control/config/load.js';
import { sinkProblem } from '../control/config/sink.js';
import type { Config } from '../control/config/types.js';
import { EXIT, FINDING_CODES, isLeashError } from '../errors.js';
import { coverageFindings, storeFindings } from '../control/policy/validate.js';
import { configPath, formatFinding, print, printJson } from './context.js';
import { systemLoaders } from '../dataplane/watcher/loaders.js';
import { startProblems } from '../dataplane/watcher/startup.js';
import { toPolicyInput } from '../control/config/policy-input.js';
import { stateDirOf } from './policy-common.js';
import { permissionDenied } from './permission.js';

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
      } catch (caught) {
        const e = permissionDenied(caught) ?? caught;
        if (opts.json && isLeashError(e)) {
          printJson({ valid: false, config: file, ...e.toJSON() });
          process.exitCode = e.exitCode;
          return;
        }
        throw e;
      }
      // The policy store (profiles, bindings, acks) is judged with the same floor; nothing when absent.
      const store = storeFindings(loaded.config, stateDirOf({}));
      // How much of a whitelist the watcher's marks would cover on this host (its mounts, now).
      const findings: Finding[] = [...loaded.findings, ...hostFindings(loaded.config), ...sinkFindings(loaded.config)];
      const warnings = findings.filter((f) => f.severity === 'warning');
      const critical = [...findings, ...store].filter((f) => f.severity === 'critical');
      if (opts.json) {
        printJson({
          valid: critical.length === 0,
          config: file,
          findings,
          inert_entries: loaded.inert,
          policy_store: store,
        });
      } else {
        for (const f of findings) print(formatFinding(f));
        for (const f of store) print(`${f.severity} ${f.code} ${f.path}: ${f.message}`);
        print(
          critical.length
            ? `${file}: ${critical.length} critical finding(s)`
            : `${file}: valid${warnings.length ? ` (${warnings.length} warning(s))` : ''}`,
        );
      }
      if (critical.length) process.exitCode = EXIT.verdict;
    });
}

/** Findings about this host rather than the file: mark coverage, from /proc/self/mountinfo. */
function hostFindings(config: Parameters<typeof coverageFindings>[0]): Finding[] {
  let mountinfo: string;
  try {
    mountinfo = fs.readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return []; // not Linux, or /proc not mounted: nothing to say about marks
  }
  return [...coverageFindings(config, mountinfo), ...startFindings(config)];
}

/** command_cannot_start: an allowed program whose interpreter or start-up files the policy refuses. */
function startFindings(config: Parameters<typeof coverageFindings>[0]): Finding[] {
  if (!config.enforcers.filesystem) return [];
  const interpreters = config.commands.interpreters ?? systemLoaders();
  return startProblems(toPolicyInput(config), interpreters).map((p) => ({
    code: 'command_cannot_start',
    severity: 'warning',
    path: 'commands.allow',
    message: p.message,
    entry: p.program,
    file: p.file,
    rule: p.rule,
  }));
}

/** Whether the service could append decision lines to logging.decisions (src/control/config/sink.ts). */
function sinkFindings(config: Config): Finding[] {
  const why = sinkProblem(config.logging.decisions);
  return why === null
    ? []
    : [
        {
          code: 'decisions_sink_unusable',
          severity: FINDING_CODES.decisions_sink_unusable,
          path: 'logging.decisions',
          message: why,
        },
      ];
}
