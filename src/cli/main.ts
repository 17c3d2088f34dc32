#!/usr/bin/env node
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { CommanderError } from 'commander';
import { EXIT, isLeashError } from '../errors.js';
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
  } catch (e) {
    if (e instanceof CommanderError) {
      // commander has already printed its message (help and --version are exit 0).
      return e.code === 'commander.helpDisplayed' || e.code === 'commander.version' || e.exitCode === 0
        ? EXIT.ok
        : EXIT.refused;
    }
    if (isLeashError(e)) {
      if (json) process.stdout.write(`${JSON.stringify(e.toJSON(), null, 2)}\n`);
      else for (const l of e.lines()) process.stderr.write(`${l}\n`);
      return e.exitCode;
    }
    const err = e as Error;
    process.stderr.write(`leash: internal error: ${err?.message ?? String(e)}\n`);
    if (process.env.LEASH_DEBUG === '1' && err?.stack) process.stderr.write(`${err.stack}\n`);
    return EXIT.internal;
  }
}

function isMain(): boolean {
  if (!process.argv[1]) return false;
  try {
    return fs.realpathSync(process.argv[1]) === fs.realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

if (isMain()) {
  run().then(
    (code) => {
      process.exitCode = code;
    },
    () => {
      process.exitCode = EXIT.internal;
    },
  );
}
