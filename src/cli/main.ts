#!/usr/bin/env node
import { Command } from 'commander';
import { registerPolicyCommands } from './bind.js';

const program = new Command('leash').description('Per-UID enforcement for local AI agents').version('0.1.0');
program.option('-c, --config <file>', 'config file (env LEASH_CONFIG, default /etc/leash/leash.yaml)');
registerPolicyCommands(program);
await program.parseAsync(process.argv);
