/**
 * `leash learn --subject NAME --since DURATION [--out FILE] [--file LOG]`: reads the decision log for
 * the subject's would_block and block lines and proposes the tightest profile that would have allowed
 * them (src/control/policy/learn.ts). The file is written atomically and never over an existing one.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import YAML from 'yaml';
import { LeashError } from '../errors.js';
import { jsonLines } from '../formats/lines.js';
import { floorOf } from '../control/policy/fragment.js';
import { learnFragment, parseDuration, renderLearned, type SeenLine } from '../control/policy/learn.js';
import { defaultPasswdSource, readPasswd } from '../control/subjects/discovery.js';
import { loadConfig } from '../control/config/load.js';
import { configPath } from './context.js';
import { subjectOptions, subjectView } from './subject.js';

/** The subject's would_block and block lines at or after `sinceMs`, from a decision log's text. */
export function seenLines(text: string, uid: number, sinceMs: number): SeenLine[] {
  const out: SeenLine[] = [];
  // A partial last line, or a line that is not a decision, is passed over.
  const { values } = jsonLines(text, (raw) => raw.includes('"would_block"') || raw.includes('"block"'));
  for (const o of values) {
    const l = o as Partial<SeenLine>;
    if (l.uid !== uid || (l.action !== 'would_block' && l.action !== 'block')) continue;
    if (typeof l.ts !== 'string' || !(Date.parse(l.ts) >= sinceMs)) continue;
    if (typeof l.surface !== 'string' || typeof l.reason !== 'string') continue;
    out.push(l as SeenLine);
  }
  return out;
}

/** Writes `text` at `file` only if nothing is there: a temp file in the same directory, then link(2), which never replaces. */
export function writeNew(file: string, text: string): void {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.tmp`);
  fs.writeFileSync(tmp, text, { mode: 0o640, flag: 'wx' });
  try {
    fs.fsyncSync(fs.openSync(tmp, 'r'));
    fs.linkSync(tmp, file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST')
      throw new LeashError('learn_out_exists', `${file} exists: leash learn never overwrites a file`, { file });
    throw new LeashError('learn_out_unwritable', `cannot write ${file}: ${(e as NodeJS.ErrnoException).code}`, {
      file,
    });
  } finally {
    fs.rmSync(tmp, { force: true });
  }
}

export function register(program: Command): void {
  const cmd = program
    .command('learn')
    .description(
      "propose the tightest profile that would have allowed a subject's would_block and block decisions (shadow mode's harvest)",
    )
    .requiredOption('--since <duration>', 'how far back to read: 30s, 15m, 2h, 7d')
    .option('--out <file>', 'write the profile here (never over an existing file); default stdout')
    .option('--file <path>', 'read this decision log instead of the configured logging.decisions');
  subjectOptions(cmd).action(
    (opts: { subject?: string; stateDir?: string; since: string; out?: string; file?: string }, c: Command) => {
      if (opts.subject === undefined)
        throw new LeashError('usage', 'leash learn needs --subject ACCOUNT', { option: '--subject' });
      const ms = parseDuration(opts.since);
      if (ms === null)
        throw new LeashError(
          'usage',
          `--since must be a duration such as 30m, 2h or 7d, not ${JSON.stringify(opts.since)}`,
          {
            option: '--since',
          },
        );
      const { config } = loadConfig(configPath(c));
      const view = subjectView(config, opts);
      if (!view.resolution.ok)
        throw new LeashError(
          'learn_unresolved',
          `${opts.subject} has no resolved policy (${view.resolution.failure.code}): fix its binding first`,
          { subject: opts.subject, code: view.resolution.failure.code },
        );
      const uid = readPasswd(defaultPasswdSource()).find((e) => e.name === opts.subject)?.uid;
      if (uid === undefined) throw new LeashError('subject_unknown', `--subject ${opts.subject}: no such account`, {});
      const log = opts.file ?? config.logging.decisions;
      if (log === 'stdout')
        throw new LeashError('log_sink_stdout', 'decisions go to stdout (the journal): pass --file', { sink: log });
      let text: string;
      try {
        text = fs.readFileSync(log, 'utf8');
      } catch (e) {
        throw new LeashError(
          'log_unreadable',
          `cannot read decision log ${log}: ${(e as NodeJS.ErrnoException).code}`,
          {
            file: log,
          },
        );
      }
      const now = new Date();
      const r = learnFragment(seenLines(text, uid, now.getTime() - ms), view.resolution.policy, floorOf(config));
      const out = renderLearned(r, { subject: opts.subject, since: opts.since, now }, (v) =>
        YAML.stringify(v, { lineWidth: 0, aliasDuplicateObjects: false }),
      );
      for (const f of r.widerThanFloor)
        process.stderr.write(`leash: warning: the proposal is wider than the floor: ${f.token} (${f.words})\n`);
      if (opts.out === undefined) {
        process.stdout.write(out);
        return;
      }
      writeNew(path.resolve(opts.out), out);
      const n = r.added.network.length + r.added.filesystem.length + r.added.commands.length;
      process.stderr.write(`leash: wrote ${opts.out}: ${n} entries learned from ${r.considered} lines\n`);
    },
  );
}
