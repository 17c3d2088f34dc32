import { permissionDenied } from './permission.js';
import type { Command } from 'commander';
import type { Account } from '../control/config/accounts.js';
import { DEFAULT_CONFIG_PATH, loadConfig } from '../control/config/load.js';
import { isLeashError } from '../errors.js';
import type { StoreContext } from '../control/policy/consent.js';
import { floorOf } from '../control/policy/fragment.js';
import { ackFlags, shellQuote } from '../control/policy/loosen.js';
import { discoverFrom, readPasswd, defaultPasswdSource } from '../control/subjects/discovery.js';

export const DEFAULT_STATE_DIR = '/var/lib/leash';
export const DEFAULT_PID_FILE = '/run/leash/leash.pid';

export interface PolicyOpts {
  stateDir?: string;
  json?: boolean;
  reconcile?: boolean;
  ack?: string[];
  config?: string;
}

export function collectAck(v: string, prev: string[] = []): string[] {
  return [...prev, v];
}

/** Options every policy command takes. */
export function policyOptions(cmd: Command, opts: { write: boolean; ack: boolean }): Command {
  cmd
    .option('--state-dir <dir>', 'policy state directory (env LEASH_STATE_DIR)')
    .option('--json', 'machine-readable output');
  if (opts.ack)
    cmd.option(
      '--ack <token>',
      'consent to one loosening, exactly as the refusal prints it (repeatable)',
      collectAck,
      [],
    );
  if (opts.write) cmd.option('--no-reconcile', 'do not signal the service to pick the change up');
  return cmd;
}

export function allOpts(cmd: Command): PolicyOpts {
  return cmd.optsWithGlobals() as PolicyOpts;
}

export function stateDirOf(o: PolicyOpts): string {
  return o.stateDir ?? process.env.LEASH_STATE_DIR ?? DEFAULT_STATE_DIR;
}

/**
 * Everything a policy command judges against: the floor (the config, through the service's own
 * loader), passwd (LEASH_PASSWD in tests), and the state directory. A floor Leash cannot read is
 * a refusal, never a judgement against nothing.
 */
export function loadContext(o: PolicyOpts): StoreContext {
  const source = defaultPasswdSource();
  const entries = readPasswd(source);
  const lookup = (name: string): Account | null => {
    const e = entries.find((x) => x.name === name);
    return e ? { name: e.name, uid: e.uid, gid: e.gid, home: e.home } : null;
  };
  const loaded = loadConfig(o.config ?? process.env.LEASH_CONFIG ?? DEFAULT_CONFIG_PATH, { lookup });
  const discovery = discoverFrom(entries, loaded.config.user);
  return { stateDir: stateDirOf(o), floor: floorOf(loaded.config), discovery, configuredUser: loaded.config.user };
}

/** The command line as typed, for the re-run line of a refusal. */
export function typedCommand(): string {
  return ['leash', ...process.argv.slice(2).map(shellQuote)].join(' ');
}

/** Prints an error (text or JSON) and sets the exit code from the catalogue. */
export function report(caught: unknown, o: PolicyOpts): void {
  const e = permissionDenied(caught) ?? caught;
  if (!isLeashError(e)) {
    const msg = (e as Error)?.message ?? String(e);
    if (o.json) process.stdout.write(`${JSON.stringify({ error: { code: 'internal', message: msg } })}\n`);
    else process.stderr.write(`leash: internal error: ${msg}\n`);
    if (process.env.LEASH_DEBUG === '1') console.error(e);
    process.exitCode = 70;
    return;
  }
  const details = { ...(e.details ?? {}) };
  // With a hint (the refusal is not fixed by re-running with --ack) there is no re-run line.
  if (e.code === 'loosening_unacknowledged' && typeof details.hint !== 'string') {
    const missing = (details.missing as string[]) ?? [];
    details.rerun = `${typedCommand()} ${ackFlags(missing)}`;
  }
  if (o.json) {
    process.stdout.write(`${JSON.stringify({ error: { code: e.code, message: e.message, details } })}\n`);
  } else {
    const lines = e.lines();
    if (e.code === 'loosening_unacknowledged') {
      lines.push('every loosening (each needs its --ack):');
      for (const f of details.findings as { token: string; words: string }[])
        lines.push(`  ${f.token}\n      ${f.words}`);
      // apply takes consent from its files, not from --ack.
      if (details.consentInFiles === true) lines.push(`missing consent: ${(details.missing as string[]).join(', ')}`);
      else lines.push(`missing consent: ${ackFlags(details.missing as string[])}`);
      if (typeof details.hint === 'string') lines.push(details.hint);
      else lines.push('re-run with consent:', `  ${details.rerun as string}`);
    }
    if (e.code === 'policy_unjudgeable' || e.code === 'profile_inert_entry') {
      /* message already says it all */
    }
    process.stderr.write(`${lines.join('\n')}\n`);
  }
  process.exitCode = e.exitCode;
}

export function impactLines(impact: { account: string; failure: { message: string } }[]): string[] {
  return impact.map((i) => `warning: ${i.account} will fail alone (denied everything): ${i.failure.message}`);
}

/** Runs an action, reporting LeashErrors with their exit code. */
export function run(cmd: Command, fn: (o: PolicyOpts) => Promise<void> | void): Promise<void> {
  const o = allOpts(cmd);
  return Promise.resolve()
    .then(() => fn(o))
    .catch((e: unknown) => report(e, o));
}
