import fs from 'node:fs';
import type { Command } from 'commander';
import { groupName, lookupAccount } from '../control/config/accounts.js';
import { editConfig, policyOwner, setUser } from '../control/config/write.js';
import { LeashError } from '../errors.js';
import { defaultPolicyPath } from '../paths.js';
import { configPath, print, printJson } from './context.js';

const ACCOUNT = /^[a-z_][a-z0-9_-]{0,31}\$?$/;

export function register(program: Command): void {
  program
    .command('init')
    .description('record the leashed user, creating the config from the shipped default policy if needed')
    .requiredOption('-u, --user <name>', 'the Linux account the agent runs as')
    .option('--json', 'print the result as JSON')
    .action(async (opts: { user: string; json?: boolean }, cmd: Command) => {
      const file = configPath(cmd);
      if (!ACCOUNT.test(opts.user)) {
        throw new LeashError('user_invalid', `"${opts.user}" is not a Linux account name (lowercase, max 32 chars)`, {
          user: opts.user,
        });
      }
      const account = lookupAccount(opts.user);
      if (!account) {
        // A policy for an account that does not exist resolves for nobody, and nothing would say so.
        throw new LeashError('user_unknown', `account ${opts.user} does not exist on this host (create it first)`, {
          user: opts.user,
        });
      }
      const existed = fs.existsSync(file);
      if (!existed) fs.mkdirSync((await import('node:path')).dirname(file), { recursive: true, mode: 0o755 });
      const { loaded, changed } = await editConfig(file, (doc) => void setUser(doc, opts.user), {
        initialText: fs.readFileSync(defaultPolicyPath(), 'utf8'),
      });
      const owner = policyOwner(loaded.config.user);
      const result = {
        config: file,
        created: !existed,
        changed,
        user: opts.user,
        uid: account.uid,
        mode: '0640',
        owner: `${owner.uid}:${owner.gid}`,
        group: groupName(owner.gid),
      };
      if (opts.json) printJson(result);
      else {
        print(
          `${existed ? (changed ? 'updated' : 'unchanged') : 'created'} ${file}: user ${opts.user} (uid ${account.uid}), mode 0640 owner root group ${result.group}`,
        );
      }
    });
}
