import { Command, Option } from 'commander';
import { DEFAULT_CONFIG_PATH } from '../control/config/load.js';
import { suggest } from '../formats/problems.js';
import { LeashError } from '../errors.js';
import { runService } from '../control/daemon/start.js';
import { register as apply } from './apply.js';
import { register as approvals } from './approvals.js';
import { register as check } from './check.js';
import { register as completion } from './completion.js';
import { register as consoleCmd } from './console.js';
import { configPath } from './context.js';
import { registerDemo } from './demo.js';
import { registerTeardown } from './teardown.js';
import { register as init } from './init.js';
import { register as learn } from './learn.js';
import { register as logs } from './logs.js';
import { register as host } from './host.js';
import { register as doctor } from './doctor.js';
import { register as mcp } from './mcp.js';
import { register as restart } from './reconcile.js';
import { register as reload } from './reload.js';
import { register as status } from './status.js';
import { registerTerminal as terminal } from './terminal.js';
import { register as surface } from './surface.js';
import { register as toolsPolicy } from './tools-policy.js';
import { register as validate } from './validate.js';
import { registerPolicyCommands as policy } from './bind.js';

/** A command group: one file in src/cli/ exporting `register(program)`. */
export type CommandGroup = (program: Command) => void;

/**
 * REGISTRATION POINT for command groups. Another part of Leash adds a subcommand (e.g. `leash demo`,
 * `leash mcp`, `leash terminal`) by writing src/cli/<name>.ts with `export function register(program)`
 * and appending it here, or, without touching this file, by passing it to `buildProgram([extra])`.
 * Throw LeashError for refusals: the top-level handler in main.ts prints it and sets the exit code.
 */
export const COMMAND_GROUPS: CommandGroup[] = [
  init,
  status,
  validate,
  surface,
  toolsPolicy,
  check,
  logs,
  learn,
  restart,
  reload,
  policy,
  apply,
  mcp,
  host,
  doctor,
  terminal,
  approvals,
  consoleCmd,
  registerDemo,
  registerTeardown,
  completion,
];

export function buildProgram(extra: CommandGroup[] = []): Command {
  const program = new Command('leash')
    .description('Per-UID enforcement for local AI agents. With no command, runs the service.')
    .version('0.1.0')
    .usage('[options] [command]')
    .addOption(new Option('-c, --config <path>', 'the config file').env('LEASH_CONFIG').default(DEFAULT_CONFIG_PATH))
    // Usage errors throw (CommanderError) instead of exiting, so main.ts maps them to exit 2.
    .exitOverride()
    // One form for every error: `leash: <message> [<code>]` (docs/cli.md); commander's are usage errors.
    .configureOutput({
      outputError: (s, write) => write(`${s.replace(/^error: /, 'leash: ').replace(/\n*$/, '')} [usage]\n`),
    })
    .showSuggestionAfterError(true)
    // An operand here is a mistyped command: commander would otherwise call it "too many arguments".
    .argument('[command]')
    .action(async (cmdName: string | undefined, _opts: unknown, cmd: Command) => {
      if (cmdName !== undefined) {
        const names = cmd.commands.flatMap((c) => [c.name(), ...c.aliases()]);
        const hint = suggest(cmdName, names);
        throw new LeashError('usage', `unknown command "${cmdName}"${hint ? ` (did you mean ${hint}?)` : ''}`, {
          command: cmdName,
        });
      }
      await runService(configPath(cmd));
    });
  for (const group of [...COMMAND_GROUPS, ...extra]) group(program);
  return program;
}
