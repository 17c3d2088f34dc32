/** `leash host init|list` (issue 41): a diff preview, a policy per server, Claude Code's project-scoped servers. */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CLI, tmpdir } from './mcp-helpers.js';

const leash = (args: string[], cwd: string) => {
  const r = spawnSync(process.execPath, [CLI, ...args], { cwd, encoding: 'utf8', env: { ...process.env, HOME: cwd } });
  return { code: r.status, out: r.stdout, err: r.stderr };
};

const CLAUDE = {
  numStartups: 3,
  mcpServers: {
    gh: { command: 'npx', args: ['-y', '@modelcontextprotocol/server-github'] },
    fs: { command: 'node', args: ['fs server.js'] },
  },
  projects: {
    '/srv/l41': { allowedTools: [], mcpServers: { db: { command: 'uvx', args: ['mcp-server-sqlite'] } } },
    '/srv/none': { allowedTools: [] },
  },
};

function home(): { dir: string; file: string; text: string } {
  const dir = tmpdir();
  const file = path.join(dir, '.claude.json');
  const text = `${JSON.stringify(CLAUDE, null, 2)}\n`;
  fs.writeFileSync(file, text);
  fs.writeFileSync(path.join(dir, 'names.yaml'), 'tools: { mode: whitelist, allow: [read_file] }\n');
  fs.writeFileSync(path.join(dir, 'other.yaml'), 'tools: { mode: whitelist, allow: [query] }\n');
  fs.writeFileSync(path.join(dir, 'asks.yaml'), 'tools: { mode: whitelist, allow: [read_file], ask: [write_file] }\n');
  return { dir, file, text };
}

describe.skipIf(!fs.existsSync(CLI))('leash host (issue 41)', () => {
  it('lists the project-scoped servers of ~/.claude.json as DIR:NAME, and --file alone infers the host', () => {
    const h = home();
    const l = leash(['host', 'list', '--file', h.file, '--json'], h.dir);
    expect(l.code, l.err).toBe(0);
    const [found] = JSON.parse(l.out) as {
      host: string;
      servers: { name: string; state: string; scope: string | null }[];
    }[];
    expect(found!.host).toBe('claude-code');
    expect(found!.servers.map((s) => [s.name, s.state, s.scope])).toEqual([
      ['gh', 'unwrapped', null],
      ['fs', 'unwrapped', null],
      ['/srv/l41:db', 'unwrapped', '/srv/l41'],
    ]);
    // A name that says nothing of its host is still a usage error, naming --host.
    fs.writeFileSync(path.join(h.dir, 'servers.json'), '{}');
    const u = leash(['host', 'list', '--file', path.join(h.dir, 'servers.json')], h.dir);
    expect([u.code, u.err]).toEqual([2, expect.stringContaining('[usage]')]);
  });

  it('previews what changes, server by server, not the whole file; the file is untouched', () => {
    const h = home();
    const r = leash(['host', 'init', '--host', 'claude-code', '--policy', 'names.yaml'], h.dir);
    expect(r.code, r.err).toBe(0);
    expect(r.out).not.toContain('numStartups');
    const changes = r.out.split('\n').filter((l) => /^[-+][^-+]/.test(l));
    expect(changes).toEqual([
      '-npx -y @modelcontextprotocol/server-github',
      `+leash mcp --policy ${path.join(h.dir, 'names.yaml')} -- npx -y @modelcontextprotocol/server-github`,
      "-node 'fs server.js'",
      `+leash mcp --policy ${path.join(h.dir, 'names.yaml')} -- node 'fs server.js'`,
      '-uvx mcp-server-sqlite',
      `+leash mcp --policy ${path.join(h.dir, 'names.yaml')} -- uvx mcp-server-sqlite`,
    ]);
    expect(fs.readFileSync(h.file, 'utf8')).toBe(h.text);
  });

  it('takes a policy per server (--server NAME --policy FILE), wraps a project-scoped one, leaves the rest of the file', () => {
    const h = home();
    const w = leash(
      [
        'host',
        'init',
        '--host',
        'claude-code',
        '--server',
        'gh',
        '--policy',
        'names.yaml',
        '--server',
        '/srv/l41:db',
        '--policy',
        'other.yaml',
        '--write',
      ],
      h.dir,
    );
    expect(w.code, w.err).toBe(0);
    const after = JSON.parse(fs.readFileSync(h.file, 'utf8')) as typeof CLAUDE;
    expect(after.mcpServers.gh.args).toEqual([
      'mcp',
      '--policy',
      path.join(h.dir, 'names.yaml'),
      '--',
      'npx',
      '-y',
      '@modelcontextprotocol/server-github',
    ]);
    expect(after.projects['/srv/l41'].mcpServers!.db).toEqual({
      command: 'leash',
      args: ['mcp', '--policy', path.join(h.dir, 'other.yaml'), '--', 'uvx', 'mcp-server-sqlite'],
    });
    // Not named: untouched, and everything else as it was.
    expect(after.mcpServers.fs).toEqual(CLAUDE.mcpServers.fs);
    expect({ ...after, mcpServers: CLAUDE.mcpServers, projects: CLAUDE.projects }).toEqual(CLAUDE);
    expect(after.projects['/srv/none']).toEqual(CLAUDE.projects['/srv/none']);
    const l = leash(['host', 'list', '--file', h.file, '--json'], h.dir);
    const states = (JSON.parse(l.out) as { servers: { name: string; state: string }[] }[])[0]!.servers;
    expect(Object.fromEntries(states.map((s) => [s.name, s.state]))).toEqual({
      gh: 'wrapped',
      fs: 'unwrapped',
      '/srv/l41:db': 'wrapped',
    });
  });

  it('refuses to wrap with a policy that asks unless --approval says who answers (nothing written)', () => {
    const h = home();
    const r = leash(
      ['host', 'init', '--host', 'claude-code', '--server', 'gh', '--policy', 'asks.yaml', '--write'],
      h.dir,
    );
    expect([r.code, r.err]).toEqual([2, expect.stringContaining('[mcp_no_approver]')]);
    expect(fs.readFileSync(h.file, 'utf8')).toBe(h.text);
    const ok = leash(
      [
        'host',
        'init',
        '--host',
        'claude-code',
        '--server',
        'gh',
        '--policy',
        'asks.yaml',
        '--approval',
        'none',
        '--write',
      ],
      h.dir,
    );
    expect(ok.code, ok.err).toBe(0);
    const after = JSON.parse(fs.readFileSync(h.file, 'utf8')) as typeof CLAUDE;
    expect(after.mcpServers.gh.args.slice(0, 5)).toEqual([
      'mcp',
      '--policy',
      path.join(h.dir, 'asks.yaml'),
      '--approval',
      'none',
    ]);
  });
});
