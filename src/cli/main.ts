#!/usr/bin/env node
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { CommanderError } from 'commander';
import { EXIT, isLeashError } from '../errors.js';
import { applyExit } from './apply.js';
import { permissionDenied } from './permission.js';
import { buildProgram, type CommandGroup } from './program.js';

/**
 * Runs the CLI and returns the exit code. The top-level handler: a LeashError prints its lines (or
 * JSON with --json) and exits with its code; a commander usage error exits 2; anything else is a
 * bug, printed as one line (stack only with LEASH_DEBUG=1), exit 70. Never a stack trace by default.
 */
export async function run(argv: string[] = process.argv, extra: CommandGroup[] = []): Promise<number> {
  const json = argv.includes('--json');
  try {
    await buildProgram(extra).parseAsync(argv);
    return typeof process.exitCode === 'number' ? process.exitCode : EXIT.ok;
  } catch (caught) {
    const e = permissionDenied(caught) ?? caught;
    if (e instanceof CommanderError) {
      // commander has already printed its message on stderr (help and --version are exit 0).
      if (e.code === 'commander.helpDisplayed' || e.code === 'commander.version' || e.exitCode === 0) return EXIT.ok;
      if (json) {
        const error = { code: 'usage', message: e.message.replace(/^error: /, ''), details: { commander: e.code } };
        process.stdout.write(`${JSON.stringify({ error }, null, 2)}\n`);
      }
      return commandOf(argv) === 'apply' ? applyExit(EXIT.refused) : EXIT.refused;
    }
    if (isLeashError(e)) {
      if (json) process.stdout.write(`${JSON.stringify(e.toJSON(), null, 2)}\n`);
      else for (const l of e.lines()) process.stderr.write(`${l}\n`);
      return commandOf(argv) === 'apply' ? applyExit(e.exitCode) : e.exitCode;
    }
    const err = e as Error;
    process.stderr.write(`leash: internal error: ${err?.message ?? String(e)} [internal]\n`);
    if (process.env.LEASH_DEBUG === '1' && err?.stack) process.stderr.write(`${err.stack}\n`);
    return EXIT.internal;
  }
}

/** The subcommand named on a command line (the global `-c PATH` skipped), or null. */
export function commandOf(argv: string[]): string | null {
  const a = argv.slice(2);
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!;
    if (x === '-c' || x === '--config') i++;
    else if (!x.startsWith('-')) return x;
  }
  return null;
}

function isMain(): boolean {
  if (!process.argv[1]) return false;
  try {
    return fs.realpathSync(process.argv[1]) === fs.realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

function crash(e: unknown): void {
  // Last resort for an error thrown outside a command (an enforcer's callback): one line, exit 70.
  const denied = permissionDenied(e);
  if (denied) {
    for (const l of denied.lines()) process.stderr.write(`${l}\n`);
    process.exit(denied.exitCode);
  }
  const err = e as Error;
  process.stderr.write(`leash: internal error: ${err?.message ?? String(e)} [internal]\n`);
  if (process.env.LEASH_DEBUG === '1' && err?.stack) process.stderr.write(`${err.stack}\n`);
  process.exit(EXIT.internal);
}

if (isMain()) {
  process.on('uncaughtException', crash);
  process.on('unhandledRejection', crash);
  run().then(
    (code) => {
      process.exitCode = code;
    },
    () => {
      process.exitCode = EXIT.internal;
    },
  );
}
