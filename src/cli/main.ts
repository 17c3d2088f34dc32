#!/usr/bin/env node
import { Command } from 'commander';
import { registerTerminal } from './terminal.js';

const program = new Command('leash').description('Per-UID enforcement for local AI agents').version('0.1.0');
registerTerminal(program);
program.parse(process.argv);
