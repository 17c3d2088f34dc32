/**
 * `leash host init|list`: the MCP configuration of a host (Cursor, Claude Desktop, Claude Code,
 * Codex) with each stdio server wrapped by `leash mcp` (./host-config.ts, docs/tools.md).
 *   init --host H [--file F] [--server NAME]... [--policy FILE] [--leash PATH] [--write]
 *        prints the edited file; --write writes it (a backup first, atomically, the original mode)
 *   list [--host H] [--file F] [--json]  what is wrapped, what is not, what cannot be (remote)
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { LeashError } from '../errors.js';
import { print, printJson } from './context.js';
import { HOSTS, hostFiles, hostSpec, listServers, wrapConfig, type HostSpec } from './host-config.js';

function readConfig(file: string): string {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT')
      throw new LeashError('host_config_missing', `no host configuration at ${file} (pass --file)`, { file });
    throw new LeashError('host_config_invalid', `cannot read ${file}: ${code ?? String(e)}`, { file });
  }
}

/** The file of a host: --file, else the first of its locations that exists, else its user-scope one. */
function configFile(h: HostSpec, file: string | undefined): string {
  if (file !== undefined) return path.resolve(file);
  const all = hostFiles(h);
  return all.find((f) => fs.existsSync(f)) ?? all[0]!;
}

/** Backs the file up (a new name, never over another file), then replaces it atomically. */
function writeWithBackup(file: string, original: string, text: string): string {
  const st = fs.statSync(file);
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  let backup = `${file}.leash-backup-${stamp}`;
  for (let n = 1; fs.existsSync(backup); n++) backup = `${file}.leash-backup-${stamp}-${n}`;
  fs.writeFileSync(backup, original, { flag: 'wx', mode: st.mode & 0o777 });
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.leash-${process.pid}.tmp`);
  fs.writeFileSync(tmp, text, { flag: 'wx', mode: st.mode & 0o777 });
  try {
    // The host may have written the file meanwhile: then nothing is replaced.
    if (fs.readFileSync(file, 'utf8') !== original)
      throw new LeashError('host_config_changed', `${file} changed while it was being edited; nothing written`, {
        file,
      });
    fs.renameSync(tmp, file);
  } catch (e) {
    fs.rmSync(tmp, { force: true });
    throw e;
  }
  return backup;
}

export function register(program: Command): void {
  const host = program.command('host').description("an MCP host's server list wrapped by leash mcp: init, list");

  host
    .command('init')
    .description("print (or --write) a host's MCP configuration with each stdio server wrapped by leash mcp")
    .requiredOption('--host <host>', `one of: ${HOSTS.map((h) => h.id).join(', ')}`)
    .option('--file <file>', "the host's configuration file (default: its usual location)")
    .option('--server <name...>', 'wrap only these servers (default: every unwrapped stdio server)')
    .option('--policy <file>', 'the wrapped servers run leash mcp --policy FILE (default: ask the service)')
    .option('--leash <path>', 'the leash executable the host starts', 'leash')
    .option('--write', 'write the file (a backup of the original beside it first)')
    .action(
      (o: { host: string; file?: string; server?: string[]; policy?: string; leash: string; write?: boolean }) => {
        const h = hostSpec(o.host);
        const file = configFile(h, o.file);
        const original = readConfig(file);
        const r = wrapConfig(h.format, original, file, {
          leash: o.leash,
          ...(o.policy !== undefined ? { policy: path.resolve(o.policy) } : {}),
          ...(o.server !== undefined ? { only: o.server } : {}),
        });
        if (!o.write) {
          process.stdout.write(r.text.endsWith('\n') ? r.text : `${r.text}\n`);
          return;
        }
        if (r.wrapped.length === 0) {
          print(`${file}: nothing to wrap (${r.entries.length} servers, none an unwrapped stdio server)`);
          return;
        }
        const backup = writeWithBackup(file, original, r.text);
        print(`${file}: wrapped ${r.wrapped.join(', ')}; the original is in ${backup}`);
      },
    );

  host
    .command('list')
    .description('the servers of each host configuration found: wrapped by leash mcp, not wrapped, or remote')
    .option('--host <host>', `only this host (${HOSTS.map((h) => h.id).join(', ')})`)
    .option('--file <file>', 'read this file (with --host)')
    .option('--json', 'JSON output')
    .action((o: { host?: string; file?: string; json?: boolean }) => {
      if (o.file !== undefined && o.host === undefined)
        throw new LeashError('usage', '--file needs --host (which format the file is in)', { option: '--file' });
      const hosts = o.host === undefined ? HOSTS : [hostSpec(o.host)];
      const found: { host: string; file: string; servers: ReturnType<typeof listServers> }[] = [];
      for (const h of hosts) {
        const files = o.file !== undefined ? [path.resolve(o.file)] : hostFiles(h).filter((f) => fs.existsSync(f));
        for (const f of files) found.push({ host: h.id, file: f, servers: listServers(h.format, readConfig(f), f) });
      }
      if (o.json) return printJson(found);
      if (found.length === 0) return print('no host configuration found');
      for (const f of found) {
        print(`${f.host} ${f.file}`);
        if (f.servers.length === 0) print('  (no servers)');
        for (const s of f.servers)
          print(
            `  ${s.name.padEnd(24)} ${s.state.padEnd(10)} ${s.command === null ? '' : [s.command, ...s.args].join(' ')}`,
          );
      }
    });
}
