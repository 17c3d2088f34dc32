/**
 * What an operator reads on the first day (issue 41): each message says what is wrong with what they typed.
 * Text is asserted here only where the text is the fix (the file named, the scope suggested); codes and exit
 * codes everywhere else.
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { ensureBuilt, leash, tmpDir } from './helpers.js';
import { maskSecretsOnly } from '../../src/engine/inspect.js';

const PASSWD = ['root:x:0:0:root:/root:/bin/bash', 'leash-t41iris:x:2941:2941::/home/leash-t41iris:/bin/sh'].join('\n');

function world(floor = 'user: root\n') {
  const dir = tmpDir('leash-l41-msg-');
  fs.writeFileSync(path.join(dir, 'passwd'), `${PASSWD}\n`);
  fs.writeFileSync(path.join(dir, 'leash.yaml'), floor);
  const env = {
    LEASH_PASSWD: path.join(dir, 'passwd'),
    LEASH_CONFIG: path.join(dir, 'leash.yaml'),
    LEASH_STATE_DIR: path.join(dir, 'state'),
    LEASH_PID_FILE: path.join(dir, 'leash.pid'),
  };
  return { dir, env, run: (args: string[]) => leash(args, { env }) };
}

beforeAll(() => ensureBuilt(), 120_000);

describe('operator messages', () => {
  it('refuses an allow entry under a blacklist: exit 2, entry_inert, nothing written', async () => {
    const w = world('user: root\ncommands: { mode: blacklist, deny: ["ssh"] }\n');
    const before = fs.readFileSync(w.env.LEASH_CONFIG);
    const r = await w.run(['-c', w.env.LEASH_CONFIG, 'cmd', 'allow', 'curl', '--json']);
    expect(r.code).toBe(2);
    expect(JSON.parse(r.stdout || r.stderr).error.code).toBe('entry_inert');
    expect(fs.readFileSync(w.env.LEASH_CONFIG)).toEqual(before);
    // A whitelist still takes it.
    const ok = await w.run(['-c', w.env.LEASH_CONFIG, 'net', 'allow', 'api.example.com', '--no-reconcile']);
    expect(ok.code).toBe(0);
  });

  it('names the missing --from file, and does not send the operator to leash init', async () => {
    const w = world();
    const r = await w.run(['profile', 'save', 'web', '--from', path.join(w.dir, 'missing-l41.yaml')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('[config_missing]');
    expect(r.stderr).toContain('missing-l41.yaml');
    expect(r.stderr).not.toContain('leash init');
  });

  it('suggests agent:<name> for a bare account name, and says nothing of teams', async () => {
    const w = world();
    const r = await w.run(['bind', 'leash-t41iris', 'web']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('[scope_invalid]');
    expect(r.stderr).toContain('agent:leash-t41iris');
    expect(r.stderr).not.toMatch(/team/);
  });

  it('says there are no decisions yet when the log does not exist', async () => {
    const w = world();
    const log = path.join(w.dir, 'log', 'decisions.jsonl');
    const r = await leash(['logs', '--file', log], { env: w.env });
    expect(r.code).toBe(3);
    expect(r.stderr).toContain('[log_unreadable]');
    expect(r.stderr).toContain('no decisions yet');
    expect(r.stderr).toContain(log);
  });

  it('says so when nothing is pending (text), and stays an empty list in JSON', async () => {
    const dir = tmpDir('leash-l41-appr-');
    const sock = path.join(dir, 'approvals.sock');
    // The socket's protocol, reduced to the one call `leash approvals` makes: list → no requests.
    const server = net.createServer((c) => {
      let buf = '';
      c.on('data', (b) => {
        buf += b.toString();
        for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
          const req = JSON.parse(buf.slice(0, i)) as { seq: number };
          buf = buf.slice(i + 1);
          c.write(`${JSON.stringify({ seq: req.seq, ok: true, requests: [] })}\n`);
        }
      });
    });
    await new Promise<void>((r) => server.listen(sock, r));
    onTestFinished(() => void server.close());
    const text = await leash(['approvals', '--socket', sock]);
    expect(text.code).toBe(0);
    expect(text.stdout.trim()).toBe('no pending requests');
    const json = await leash(['approvals', '--socket', sock, '--json']);
    expect(JSON.parse(json.stdout)).toEqual({ requests: [] });
  });

  it('reports a YAML indentation error as one file:line:col line', async () => {
    const w = world();
    // One bad indent; the parser reports it twice (and up to four times in other shapes).
    const bad = path.join(w.dir, 'bad.yaml');
    fs.writeFileSync(bad, 'network:\n  mode: whitelist\n   allow: [a.com]\n');
    const r = await w.run(['-c', bad, 'validate']);
    expect(r.code).toBe(2);
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`${bad}:2:9: `);
    expect(lines[0]).toContain('[config_syntax]');
  });

  it.skipIf(process.getuid?.() !== 0)('init names the group that owns the policy', async () => {
    const dir = tmpDir('leash-l41-init-');
    const file = path.join(dir, 'leash.yaml');
    const r = await leash(['-c', file, 'init', '--user', 'root', '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ owner: '0:0', group: 'root' });
    const t = await leash(['-c', file, 'init', '--user', 'root']);
    expect(t.stdout).toMatch(/group root$/m);
  });

  it.each([
    ['config: api_key = "sk-proj-AbCdEf1234567890XyZabc12" rest', 'config: api_key = "****" rest'],
    ["token: 'abcd1234efgh5678'", "token: '****'"],
    ['db_password=S3cr3tValue; next', 'db_password=****; next'],
  ])('masks a credential assignment keeping its shape: %s', (input, masked) => {
    expect(maskSecretsOnly(input)).toBe(masked);
  });
});
