#!/usr/bin/env node
import { Command } from 'commander';

const program = new Command('leash').description('Per-UID enforcement for local AI agents').version('0.1.0');
program.parse(process.argv);
