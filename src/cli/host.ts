/**
 * `leash host init|list`: the MCP configuration of a host (Cursor, Claude Desktop, Claude Code,
 * Codex) with each stdio server wrapped by `leash mcp` (./host-config.ts, docs/tools.md).
 *   init --host H [--file F] [--policy FILE] [--server NAME... [--policy FILE]]... [--approval tty|none]
 *        [--leash PATH] [--print] [--write]
 *        prints what changes, server by server (--print: the whole edited file); --write writes it (a
 *        backup first, atomically, the original mode). A --policy after --server names applies to them.
 *   list [--host H] [--file F] [--json]  what is wrapped, what is not, what cannot be (remote)
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { LeashError } from '../errors.js';
import { print, printJson } from './context.js';
import { shellQuote } from '../control/policy/loosen.js';
import {
  HOSTS,
  hostFiles,
  hostSpec,
  inferHost,
  listServers,
  wrapConfig,
  wrappedArgs,
  type HostSpec,
  type WrapOptions,
} from './host-config.js';
import { askSources, noApprover, parseApprovalMode } from '../tools/gate/approver.js';

/**
 * --server and --policy in the order typed: a --policy binds to the servers named since the previous
 * --policy; one before any --server is the default for the rest. Commander calls these parsers in order.
 */
function pairing() {
  const seq: { kind: 'server' | 'policy'; v: string }[] = [];
  const push = (kind: 'server' | 'policy') => (v: string) => {
    seq.push({ kind, v });
    return v;
  };
  const resolve = () => {
    const only: string[] = [];
    const policies: Record<string, string> = {};
    let policy: string | undefined;
    let group: string[] = [];
    for (const e of seq) {
      if (e.kind === 'server') {
        only.push(e.v);
        group.push(e.v);
        continue;
      }
      const file = path.resolve(e.v);
      if (group.length === 0) {
        if (policy !== undefined)
          throw new LeashError('usage', '--policy given twice with no --server between them', { option: '--policy' });
        policy = file;
      } else for (const n of group) policies[n] = file;
      group = [];
    }
    return { only: only.length ? only : undefined, policies, policy };
  };
  return { server: push('server'), policy: push('policy'), resolve };
}

/** What the wrap changes, server by server: the command line before (-) and after (+). */
function preview(file: string, o: WrapOptions, r: ReturnType<typeof wrapConfig>): string {
  const line = (argv: string[]) => argv.map(shellQuote).join(' ');
  const out = [`--- ${file}`, `+++ ${file} (leash host init --write writes this, a backup first)`];
  for (const e of r.entries.filter((x) => r.wrapped.includes(x.name))) {
    out.push(`@@ ${e.scope === null ? '' : `projects[${e.scope}].`}mcpServers.${e.key} @@`);
    out.push(`-${line([e.command!, ...e.args])}`, `+${line([o.leash, ...wrappedArgs(o, e)])}`);
  }
  if (r.wrapped.length === 0)
    out.push(`(nothing to wrap: ${r.entries.length} servers, none an unwrapped stdio server)`);
  return `${out.join('\n')}\n`;
}

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
  const pair = pairing();

  host
    .command('init')
    .description("print (or --write) a host's MCP configuration with each stdio server wrapped by leash mcp")
    .requiredOption('--host <host>', `one of: ${HOSTS.map((h) => h.id).join(', ')}`)
    .option('--file <file>', "the host's configuration file (default: its usual location)")
    .option('--server <name...>', 'wrap only these servers (default: every unwrapped stdio server)', pair.server)
    .option(
      '--policy <file>',
      'leash mcp --policy FILE for the servers named just before it, else for all',
      pair.policy,
    )
    .option('--approval <who>', 'with a policy that asks: who answers, tty (the terminal) or none (refused)')
    .option('--leash <path>', 'the leash executable the host starts', 'leash')
    .option('--print', 'print the whole edited file instead of what changes')
    .option('--write', 'write the file (a backup of the original beside it first)')
    .action(
      (o: { host: string; file?: string; approval?: string; leash: string; print?: boolean; write?: boolean }) => {
        const h = hostSpec(o.host);
        const file = configFile(h, o.file);
        const original = readConfig(file);
        const { only, policies, policy } = pair.resolve();
        const approval = parseApprovalMode(o.approval);
        const wrap: WrapOptions = {
          leash: o.leash,
          ...(policy !== undefined ? { policy } : {}),
          policies,
          ...(approval !== undefined ? { approval } : {}),
          ...(only !== undefined ? { only } : {}),
        };
        const r = wrapConfig(h.format, original, file, wrap);
        // A wrapped server whose policy asks and names nobody to answer would refuse to start under the host.
        if (approval === undefined)
          for (const p of new Set(
            r.entries.filter((e) => r.wrapped.includes(e.name)).map((e) => policies[e.name] ?? policy),
          ))
            if (p !== undefined) {
              const asks = askSources(p);
              if (asks.length) throw noApprover(p, asks);
            }
        if (!o.write) {
          if (o.print) process.stdout.write(r.text.endsWith('\n') ? r.text : `${r.text}\n`);
          else process.stdout.write(preview(file, wrap, r));
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
    .option('--file <file>', 'read this file (its host from its name, else --host)')
    .option('--json', 'JSON output')
    .action((o: { host?: string; file?: string; json?: boolean }) => {
      let inferred: HostSpec | null = null;
      if (o.file !== undefined && o.host === undefined) {
        inferred = inferHost(o.file);
        if (inferred === null)
          throw new LeashError(
            'usage',
            `cannot tell the host of ${o.file} from its name: pass --host (${HOSTS.map((h) => h.id).join(', ')})`,
            { option: '--file' },
          );
      }
      const hosts = inferred !== null ? [inferred] : o.host === undefined ? HOSTS : [hostSpec(o.host)];
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
