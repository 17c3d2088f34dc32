import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseToml } from 'smol-toml';
import { HOSTS, hostFiles, hostSpec, listServers, wrapConfig } from '../../../src/cli/host-config.js';
import { isLeashError } from '../../../src/errors.js';

const FIX = path.resolve(import.meta.dirname, '../../fixtures/hosts');
const read = (f: string) => fs.readFileSync(path.join(FIX, f), 'utf8');
const CASES = [
  { host: 'cursor', file: 'cursor.json', out: 'cursor.wrapped.json', untouched: ['remote-docs'] },
  { host: 'claude-desktop', file: 'claude-desktop.json', out: 'claude-desktop.wrapped.json', untouched: ['already'] },
  { host: 'claude-code', file: 'claude-code.json', out: 'claude-code.wrapped.json', untouched: ['sentry'] },
  { host: 'codex', file: 'codex.toml', out: 'codex.wrapped.toml', untouched: ['wrapped'] },
] as const;
const O = { leash: '/usr/bin/leash' };

/** The text of one server entry: its JSON member, or its TOML table up to the next header. */
function entryText(text: string, name: string, toml: boolean): string {
  if (toml) {
    const at = text.indexOf(`[mcp_servers.${name}]`);
    const next = text.indexOf('\n[', at + 1);
    return text.slice(at, next < 0 ? undefined : next);
  }
  const at = text.indexOf(`"${name}"`);
  let depth = 0;
  for (let i = text.indexOf('{', at); i < text.length; i++) {
    if (text[i] === '{') depth++;
    else if (text[i] === '}' && --depth === 0) return text.slice(at, i + 1);
  }
  throw new Error(`no entry ${name}`);
}

describe('leash host init: the wrap of each host format', () => {
  it.each(CASES)('$host: the output is the fixture of the documented format', ({ host, file, out }) => {
    const h = hostSpec(host);
    const r = wrapConfig(h.format, read(file), file, O);
    expect(r.text).toBe(read(out).replace(/\n$/, read(file).endsWith('\n') ? '\n' : ''));
    // Every stdio server is now wrapped; remote ones stay as they are.
    const after = listServers(h.format, r.text, out);
    expect(after.filter((e) => e.state === 'unwrapped')).toEqual([]);
    for (const e of after.filter((x) => x.state === 'wrapped')) {
      expect(e.command === '/usr/bin/leash' || e.command === 'leash').toBe(true);
      expect(e.args.slice(0, 2)).toEqual(['mcp', '--']);
    }
  });

  it.each(CASES)(
    '$host: an unrelated entry and the rest of the file stay byte-identical',
    ({ host, file, untouched }) => {
      const h = hostSpec(host);
      const text = read(file);
      const r = wrapConfig(h.format, text, file, O);
      for (const name of untouched)
        expect(entryText(r.text, name, h.format.startsWith('toml'))).toBe(
          entryText(text, name, h.format.startsWith('toml')),
        );
      // Wrapped twice: nothing more to wrap, the same bytes.
      const again = wrapConfig(h.format, r.text, file, O);
      expect(again.wrapped).toEqual([]);
      expect(again.text).toBe(r.text);
    },
  );

  it('the original server command, its arguments and environment are what leash mcp runs', () => {
    const r = wrapConfig('json-mcpServers', read('claude-code.json'), 'x', { leash: 'leash', policy: '/p/tools.yaml' });
    const doc = JSON.parse(r.text) as { mcpServers: Record<string, { command: string; args: string[]; env?: object }> };
    expect(doc.mcpServers.github).toEqual({
      type: 'stdio',
      command: 'leash',
      args: ['mcp', '--policy', '/p/tools.yaml', '--', 'npx', '-y', '@modelcontextprotocol/server-github'],
      env: { GITHUB_PERSONAL_ACCESS_TOKEN: 'ghp_example_not_a_real_token' },
    });
    const t = parseToml(wrapConfig('toml-mcp_servers', read('codex.toml'), 'x', O).text) as {
      mcp_servers: Record<string, { command: string; args: string[]; env?: object }>;
      profiles: object;
    };
    expect(t.mcp_servers['my server']).toEqual({
      command: '/usr/bin/leash',
      args: ['mcp', '--', 'uvx', 'mcp-server-time'],
      env: { TZ: 'UTC' },
    });
    expect(t.mcp_servers.noargs).toEqual({
      command: '/usr/bin/leash',
      args: ['mcp', '--', 'my-server'],
      env: { A: '1' },
    });
    expect(t.profiles).toEqual({ fast: { model: 'o4-mini' } });
  });

  it('--server wraps only the servers named; naming a remote or wrapped one, or none that exists, is refused', () => {
    const r = wrapConfig('json-mcpServers', read('cursor.json'), 'x', { ...O, only: ['git'] });
    expect(r.wrapped).toEqual(['git']);
    expect(entryText(r.text, 'filesystem', false)).toBe(entryText(read('cursor.json'), 'filesystem', false));
    for (const only of [['remote-docs'], ['nope']]) {
      let code: string | undefined;
      try {
        wrapConfig('json-mcpServers', read('cursor.json'), 'x', { ...O, only });
      } catch (e) {
        if (isLeashError(e)) code = e.code;
      }
      expect(code).toBe('usage');
    }
  });

  it('a file that does not parse, or a server list that is not an object, is host_config_invalid', () => {
    for (const [fmt, text] of [
      ['json-mcpServers', '{"mcpServers": {'],
      ['json-mcpServers', '// a comment\n{}'],
      ['json-mcpServers', '{"mcpServers": []}'],
      ['toml-mcp_servers', '[mcp_servers.x\ncommand = 1'],
    ] as const) {
      let code: string | undefined;
      try {
        wrapConfig(fmt, text, 'x', O);
      } catch (e) {
        if (isLeashError(e)) code = e.code;
      }
      expect(code, text).toBe('host_config_invalid');
    }
  });

  it('a TOML server not written as its own table is host_entry_uneditable, nothing changed', () => {
    let code: string | undefined;
    try {
      wrapConfig('toml-mcp_servers', 'mcp_servers = { a = { command = "x" } }\n', 'x', O);
    } catch (e) {
      if (isLeashError(e)) code = e.code;
    }
    expect(code).toBe('host_entry_uneditable');
  });

  it('a JSON entry with duplicate keys is edited where JSON.parse reads it, or refused', () => {
    const text = '{"mcpServers": {"a": {"command": "x", "command": "y", "args": []}}}';
    const r = wrapConfig('json-mcpServers', text, 'x', O);
    expect((JSON.parse(r.text) as { mcpServers: { a: { args: string[] } } }).mcpServers.a.args).toEqual([
      'mcp',
      '--',
      'y',
    ]);
  });

  it('each host names its files under the home directory (CODEX_HOME for codex)', () => {
    const env = { HOME: '/home/u' };
    expect(hostFiles(hostSpec('cursor'), env, '/w')).toEqual(['/home/u/.cursor/mcp.json', '/w/.cursor/mcp.json']);
    expect(hostFiles(hostSpec('claude-desktop'), env, '/w')).toEqual([
      '/home/u/.config/Claude/claude_desktop_config.json',
    ]);
    expect(hostFiles(hostSpec('claude-code'), env, '/w')).toEqual(['/home/u/.claude.json', '/w/.mcp.json']);
    expect(hostFiles(hostSpec('codex'), env, '/w')).toEqual(['/home/u/.codex/config.toml']);
    expect(hostFiles(hostSpec('codex'), { ...env, CODEX_HOME: '/c' }, '/w')).toEqual(['/c/config.toml']);
    expect(HOSTS.map((h) => h.id)).toEqual(['cursor', 'claude-desktop', 'claude-code', 'codex']);
    for (const h of HOSTS) expect(h.checked).toMatch(/2026-12-02/);
  });
});
