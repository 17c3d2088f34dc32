/** `leash host init|list` and `leash doctor` as a user runs them. */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CLI, tmpdir } from './mcp-helpers.js';

const FIX = path.resolve(import.meta.dirname, '../fixtures/hosts');
const ECHO = path.resolve(import.meta.dirname, '../../dist/bench/mcp-echo.js');
const leash = (args: string[], cwd: string, env: NodeJS.ProcessEnv = {}) => {
  const r = spawnSync(process.execPath, [CLI, ...args], { cwd, encoding: 'utf8', env: { ...process.env, ...env } });
  return { code: r.status, out: r.stdout, err: r.stderr };
};

describe('leash host', () => {
  it('needs the built CLI', () => {
    expect(fs.existsSync(CLI), `${CLI} is missing: run npm run build`).toBe(true);
  });

  it('init --write backs the file up, wraps the stdio servers, keeps the rest; list shows it; a second init writes nothing', () => {
    const home = tmpdir();
    fs.mkdirSync(path.join(home, '.cursor'));
    const file = path.join(home, '.cursor', 'mcp.json');
    const original = fs.readFileSync(path.join(FIX, 'cursor.json'), 'utf8');
    fs.writeFileSync(file, original, { mode: 0o640 });
    const env = { HOME: home };
    // Without --write: printed (--print: the whole file), the file untouched.
    const shown = leash(['host', 'init', '--host', 'cursor', '--leash', '/usr/bin/leash', '--print'], home, env);
    expect(shown.code).toBe(0);
    expect(shown.out).toBe(fs.readFileSync(path.join(FIX, 'cursor.wrapped.json'), 'utf8'));
    expect(fs.readFileSync(file, 'utf8')).toBe(original);
    const w = leash(['host', 'init', '--host', 'cursor', '--leash', '/usr/bin/leash', '--write'], home, env);
    expect(w.code, w.err).toBe(0);
    expect(fs.readFileSync(file, 'utf8')).toBe(shown.out);
    expect(fs.statSync(file).mode & 0o777).toBe(0o640);
    const backups = fs.readdirSync(path.join(home, '.cursor')).filter((f) => f.startsWith('mcp.json.leash-backup-'));
    expect(backups).toHaveLength(1);
    expect(fs.readFileSync(path.join(home, '.cursor', backups[0]!), 'utf8')).toBe(original);
    const l = leash(['host', 'list', '--host', 'cursor', '--json'], home, env);
    expect(l.code).toBe(0);
    const listed = JSON.parse(l.out) as { file: string; servers: { name: string; state: string }[] }[];
    expect(listed[0]!.file).toBe(file);
    expect(Object.fromEntries(listed[0]!.servers.map((s) => [s.name, s.state]))).toEqual({
      filesystem: 'wrapped',
      'remote-docs': 'remote',
      git: 'wrapped',
    });
    const again = leash(['host', 'init', '--host', 'cursor', '--write'], home, env);
    expect(again.code).toBe(0);
    expect(fs.readFileSync(file, 'utf8')).toBe(shown.out);
    expect(fs.readdirSync(path.join(home, '.cursor')).filter((f) => f.includes('leash-backup'))).toHaveLength(1);
  });

  it('refusals: an unknown host, a missing file, a file that is not JSON — exit 2 with the code, nothing written', () => {
    const home = tmpdir();
    const bad = leash(['host', 'init', '--host', 'vim'], home, { HOME: home });
    expect([bad.code, bad.err]).toEqual([2, expect.stringContaining('[usage]')]);
    const missing = leash(['host', 'init', '--host', 'codex'], home, { HOME: home, CODEX_HOME: '' });
    expect([missing.code, missing.err]).toEqual([2, expect.stringContaining('[host_config_missing]')]);
    const f = path.join(home, 'c.json');
    fs.writeFileSync(f, '{"mcpServers": {');
    const inv = leash(['host', 'init', '--host', 'claude-code', '--file', f, '--write'], home, { HOME: home });
    expect([inv.code, inv.err]).toEqual([2, expect.stringContaining('[host_config_invalid]')]);
    expect(fs.readFileSync(f, 'utf8')).toBe('{"mcpServers": {');
    expect(fs.readdirSync(home)).toEqual(['c.json']);
  });
});

describe('leash doctor', () => {
  it('passes with a valid policy and a server that answers; the socket is not needed with --policy', () => {
    const d = tmpdir();
    fs.writeFileSync(path.join(d, 'p.yaml'), 'tools:\n  default: deny\n');
    const r = leash(
      ['doctor', '--json', '--policy', 'p.yaml', '--socket', path.join(d, 'none.sock'), '--', process.execPath, ECHO],
      d,
    );
    expect(r.code, r.out + r.err).toBe(0);
    const j = JSON.parse(r.out) as { ok: boolean; checks: { check: string; ok: boolean }[] };
    expect(j.ok).toBe(true);
    expect(j.checks.map((c) => c.check)).toEqual(['node', 'policy', 'approval', 'socket', 'server', 'pid_namespace']);
  });

  it('exit 1 naming the failed check: a bad policy, a server that is not there, a server that never answers', () => {
    const d = tmpdir();
    fs.writeFileSync(path.join(d, 'bad.yaml'), 'tools:\n  default: maybe\n');
    fs.writeFileSync(path.join(d, 'p.yaml'), 'tools:\n  default: deny\n');
    const sock = ['--socket', path.join(d, 'none.sock')];
    const failed = (args: string[]) => {
      const r = leash(['doctor', '--json', ...sock, ...args], d);
      const j = JSON.parse(r.out) as { checks: { check: string; ok: boolean; code?: string }[] };
      return { code: r.code, failed: j.checks.filter((c) => !c.ok).map((c) => [c.check, c.code]) };
    };
    expect(failed(['--policy', 'bad.yaml'])).toMatchObject({ code: 1, failed: [['policy', expect.any(String)]] });
    expect(failed(['--policy', 'p.yaml', '--', path.join(d, 'no-such-server')])).toEqual({
      code: 1,
      failed: [['server', 'mcp_server_unrunnable']],
    });
    // A server that reads its input and never answers: the probe gives up at the timeout.
    const mute = path.join(d, 'mute.js');
    fs.writeFileSync(mute, 'process.stdin.resume();\n');
    const t0 = Date.now();
    expect(failed(['--policy', 'p.yaml', '--timeout', '500', '--', process.execPath, mute])).toEqual({
      code: 1,
      failed: [['server', 'mcp_server_unrunnable']],
    });
    expect(Date.now() - t0).toBeLessThan(10_000);
    // Without --policy the service socket is needed: one that is not there fails.
    const r = leash(['-c', path.join(d, 'p.yaml'), 'doctor', ...sock], d);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/^FAIL socket .*\[mcp_service_unreachable\]$/m);
    expect(leash(['doctor', '--timeout', 'soon'], d).code).toBe(2);
  });
});
