import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { call, calledTools, CLI, FAKE, init, startGate, tmpdir } from './mcp-helpers.js';

const run = (args: string[], env: NodeJS.ProcessEnv = {}, input = '') =>
  spawnSync(process.execPath, [CLI, ...args], {
    encoding: 'utf8',
    input,
    env: { ...process.env, ...env },
    timeout: 30_000,
  });

describe.skipIf(!fs.existsSync(CLI))('leash mcp learn', () => {
  it('writes the tightest-fit profile from a script, and the gate then enforces exactly that', async () => {
    const d = tmpdir();
    const script = path.join(d, 'calls.json');
    fs.writeFileSync(
      script,
      JSON.stringify(
        [
          { tool: 'read_file', arguments: { path: '/tmp/a.txt' } },
          { tool: 'read_file', arguments: { path: '/tmp/b.txt' } },
          { tool: 'run_cmd', arguments: { cmd: 'ls', count: 3 } },
          { tool: 'search' },
          { tool: 'fail', arguments: { x: 1 } },
        ],
        null,
        2,
      ),
    );
    const out = path.join(d, 'sub', 'profile.yaml');
    const r = run(['mcp', 'learn', '--script', script, '--out', out, '--', process.execPath, FAKE], {
      FAKE_MODE: 'banner',
    });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/learned from 4 successful calls \(1 not learned\)/);
    expect(r.stderr).toMatch(/server MCP revision 2025-06-18/);
    const text = fs.readFileSync(out, 'utf8');
    expect(text).not.toContain('.*$');
    expect(text).toContain('delete_all'); // under _not_called

    const g = startGate({ policy: text });
    g.send(init(0));
    await g.answer(0);
    g.send(call(1, 'read_file', { path: '/tmp/c.txt' }));
    g.send(call(2, 'read_file', { path: '/etc/passwd' }));
    g.send(call(3, 'read_file', { path: '/tmp/../etc/passwd' }));
    g.send(call(4, 'run_cmd', { cmd: 'ls', count: 9 }));
    g.send(call(5, 'run_cmd', { cmd: 'ls', count: '9' }));
    g.send(call(6, 'search', {}));
    g.send(call(7, 'search', { q: 'x' }));
    g.send(call(8, 'delete_all'));
    g.send(call(9, 'fail', { x: 1 }));
    const ok = [1, 4, 6];
    for (const id of [1, 2, 3, 4, 5, 6, 7, 8, 9]) {
      const a = await g.answer(id);
      if (ok.includes(id)) expect(a.result, `call ${id}`).toBeDefined();
      else expect(a.error, `call ${id}`).toMatchObject({ code: -32001 });
    }
    // The learned policy hides what it does not allow.
    g.send({ jsonrpc: '2.0', id: 10, method: 'tools/list' });
    const list = (await g.answer(10)) as { result: { tools: { name: string }[] } };
    expect(list.result.tools.map((t) => t.name).sort()).toEqual(['read_file', 'run_cmd', 'search']);
    g.end();
    expect(await g.exited).toBe(0);
    expect(calledTools(g)).toEqual(['read_file', 'run_cmd', 'search']);
  });

  it('a failed session writes nothing over --out and exits 2', () => {
    const d = tmpdir();
    const script = path.join(d, 'calls.json');
    fs.writeFileSync(script, JSON.stringify([{ tool: 'search' }, { tool: 'die' }]));
    const out = path.join(d, 'profile.yaml');
    fs.writeFileSync(out, 'the good policy\n');
    const r = run(['mcp', 'learn', '--script', script, '--out', out, '--', process.execPath, FAKE], {
      FAKE_MODE: 'die:die',
    });
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/learn failed: the server exited/);
    expect(fs.readFileSync(out, 'utf8')).toBe('the good policy\n');
    expect(r.stdout).toContain('search'); // the partial profile, for review
    expect(fs.readdirSync(d).sort()).toEqual(['calls.json', 'profile.yaml']);
  });

  it('a server that does not answer within --timeout fails learn without writing', () => {
    const d = tmpdir();
    const script = path.join(d, 'calls.json');
    fs.writeFileSync(script, JSON.stringify([{ tool: 'slow' }]));
    const out = path.join(d, 'profile.yaml');
    const r = run(
      ['mcp', 'learn', '--timeout', '300', '--script', script, '--out', out, '--', process.execPath, FAKE],
      { FAKE_MODE: 'slow:slow' },
    );
    expect(r.status).toBe(2);
    expect(fs.existsSync(out)).toBe(false);
  });

  it('refuses a script that is not a list of calls before starting the server', () => {
    const d = tmpdir();
    const script = path.join(d, 'calls.json');
    fs.writeFileSync(script, '{"tool":"x"}');
    const r = run(['mcp', 'learn', '--script', script, '--out', path.join(d, 'o.yaml'), '--', process.execPath, FAKE], {
      FAKE_RECORD: path.join(d, 'rec'),
    });
    expect(r.status).toBe(2);
    expect(fs.existsSync(path.join(d, 'rec'))).toBe(false);
  });

  it('learns live from a relayed session', async () => {
    const d = tmpdir();
    const out = path.join(d, 'live.yaml');
    const p = spawn(process.execPath, [CLI, 'mcp', 'learn', '--out', out, '--', process.execPath, FAKE], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let err = '';
    p.stderr.on('data', (c: Buffer) => (err += c.toString()));
    let n = 0;
    p.stdout.on('data', (c: Buffer) => (n += c.toString().split('\n').length - 1));
    for (const m of [
      init(0),
      { jsonrpc: '2.0', id: 1, method: 'tools/list' },
      call(2, 'search', { q: 'abc' }),
      call(3, 'search', { q: 'abd' }),
    ])
      p.stdin.write(JSON.stringify(m) + '\n');
    const deadline = Date.now() + 10_000;
    while (n < 4 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    p.stdin.end();
    const code = await new Promise<number | null>((r) => p.on('exit', (c) => r(c)));
    expect(code, err).toBe(0);
    const text = fs.readFileSync(out, 'utf8');
    expect(text).toContain('search');
    expect(text).toMatch(/\^ab\[a-z\]\*\$/);
    expect(err).toMatch(/learned from 2 successful calls/);
  });
});

describe.skipIf(!fs.existsSync(CLI))('leash mcp learn (live, Ctrl-C)', () => {
  it('writes the profile when the session is interrupted', async () => {
    const d = tmpdir();
    const out = path.join(d, 'live.yaml');
    const p = spawn(process.execPath, [CLI, 'mcp', 'learn', '--out', out, '--', process.execPath, FAKE], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let n = 0;
    p.stdout.on('data', (c: Buffer) => (n += c.toString().split('\n').length - 1));
    for (const m of [init(0), call(1, 'read_file', { path: '/srv/a' })]) p.stdin.write(JSON.stringify(m) + '\n');
    const deadline = Date.now() + 10_000;
    while (n < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    p.kill('SIGINT');
    const code = await new Promise<number | null>((r) => p.on('exit', (c) => r(c)));
    expect(code).toBe(0);
    expect(fs.readFileSync(out, 'utf8')).toMatch(/read_file/);
  });
});

describe.skipIf(!fs.existsSync(CLI))('leash mcp check', () => {
  it('judges one call: exit 0 allow, 1 block, with the reason', () => {
    const d = tmpdir();
    const pf = path.join(d, 'p.yaml');
    fs.writeFileSync(pf, 'tools:\n  allow: [read_file]\n  args:\n    read_file: { deny: { "**.path": ["^/etc/"] } }\n');
    const ok = run(['mcp', 'check', 'read_file', '--inputs', '{"path":"/srv/x"}', '--policy', pf]);
    expect(ok.status).toBe(0);
    expect(JSON.parse(ok.stdout)).toMatchObject({ action: 'allow', reason: 'allow_entry' });
    const no = run(['mcp', 'check', 'READ_FILE', '--inputs', '{"path":{"$ref":"/etc/shadow"}}', '--policy', pf]);
    expect(no.status).toBe(1);
    expect(JSON.parse(no.stdout)).toMatchObject({ action: 'block', reason: 'arg_denied', at: 'path.$ref' });
    const bad = run(['mcp', 'check', 'read_file', '--inputs', '{"a":1,"a":2}', '--policy', pf]);
    expect(bad.status).toBe(2);
  });
});
