import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import {
  deadOrZombie,
  killLeftovers,
  leashBin,
  makeLab,
  readJsonl,
  requireBuild,
  startTerminal,
  writeScript,
  type Lab,
} from './helpers/terminal-lab.js';

const policy = { mode: 'whitelist', allow: ['echo', 'ls', 'cat', 'pwd', 'env', 'touch', 'sleep'], deny: [] };

async function terminal(lab: Lab, commands: Record<string, unknown> = policy, args: string[] = [], env = {}) {
  lab.writePolicy(commands);
  return startTerminal(lab, { args, env });
}

async function waitFor(cond: () => boolean, ms = 3000): Promise<boolean> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (cond()) return true;
    await new Promise((r) => setTimeout(r, 25));
  }
  return cond();
}

describe('leash terminal: the cwd jail', () => {
  function jailWithLinks(): Lab {
    const lab = makeLab();
    fs.mkdirSync(path.join(lab.jail, 'sub', 'deep'), { recursive: true });
    fs.mkdirSync(path.join(lab.base, 'outside'));
    fs.writeFileSync(path.join(lab.base, 'outside', 'secret.txt'), 'outside');
    fs.symlinkSync('/etc', path.join(lab.jail, 'etc-link'));
    fs.symlinkSync('../outside', path.join(lab.jail, 'up-link'));
    fs.symlinkSync('up-link', path.join(lab.jail, 'chain-link'));
    fs.symlinkSync('sub/deep', path.join(lab.jail, 'inner-link'));
    return lab;
  }

  it.each([
    ['..'],
    ['../outside'],
    ['sub/../../outside'],
    ['./sub/deep/../../..'],
    ['/etc'],
    ['/'],
    ['etc-link'],
    ['up-link'],
    ['chain-link'],
    ['sub/../up-link'],
    ['does-not-exist'],
  ])('refuses cwd %j with CWD_ESCAPE and runs nothing', async (cwd) => {
    const lab = jailWithLinks();
    const t = await terminal(lab);
    const r = await t.call('run_command', { command: 'touch escaped', cwd });
    expect(r).toMatchObject({ ok: false, code: 'CWD_ESCAPE', exit_code: null });
    expect(fs.existsSync(path.join(lab.base, 'outside', 'escaped'))).toBe(false);
    expect(fs.existsSync('/etc/escaped')).toBe(false);
  });

  it('refuses a jail-absolute path with a sibling prefix (/x/jail vs /x/jailbreak)', async () => {
    const lab = jailWithLinks();
    fs.mkdirSync(lab.jail + 'break');
    const t = await terminal(lab);
    expect((await t.call('run_command', { command: 'pwd', cwd: lab.jail + 'break' })).code).toBe('CWD_ESCAPE');
  });

  it.each([
    ['sub', 'sub'],
    ['sub/deep/..', 'sub'],
    ['inner-link', 'sub/deep'],
  ])('accepts cwd %j and runs in the real directory', async (cwd, real) => {
    const lab = jailWithLinks();
    const t = await terminal(lab);
    const r = await t.call('run_command', { command: 'pwd', cwd });
    expect(r).toMatchObject({ code: 'OK', stdout: `${path.join(lab.jail, real)}\n` });
  });

  it('does not resolve a relative binary against a refused cwd', async () => {
    const lab = jailWithLinks();
    writeScript(path.join(lab.base, 'outside', 'run.sh'), 'touch "$HOME/ran"');
    const t = await terminal(lab, { mode: 'blacklist', allow: [], deny: [] });
    const r = await t.call('run_command', { command: './run.sh', cwd: 'up-link' });
    expect(r.code).toBe('CWD_ESCAPE');
    expect(fs.existsSync(path.join(lab.jail, 'ran'))).toBe(false);
  });
});

describe('leash terminal: process lifetime', () => {
  it('on timeout kills the whole process tree: the grandchild is dead afterwards', async () => {
    const lab = makeLab();
    const pidFile = path.join(lab.jail, 'grandchild.pid');
    const leaderFile = path.join(lab.jail, 'leader.pid');
    killLeftovers(lab.jail);
    const s = writeScript(
      path.join(lab.jail, 'tree.sh'),
      `echo $$ > ${leaderFile}\nsleep 300 &\necho $! > ${pidFile}\nsleep 300`,
    );
    const t = await terminal(lab, { mode: 'whitelist', allow: [s], deny: [] }, ['--timeout', '1000']);
    const r = await t.call('run_command', { command: './tree.sh' });
    expect(r).toMatchObject({ ok: false, code: 'TIMEOUT', exit_code: null });
    const pid = Number(fs.readFileSync(pidFile, 'utf8'));
    expect(pid).toBeGreaterThan(1);
    expect(await waitFor(() => deadOrZombie(pid))).toBe(true);
    expect(deadOrZombie(Number(fs.readFileSync(leaderFile, 'utf8')))).toBe(true);
  });

  it('when the command exits, a background process it left behind is killed too', async () => {
    const lab = makeLab();
    const pidFile = path.join(lab.jail, 'orphan.pid');
    killLeftovers(lab.jail);
    const s = writeScript(path.join(lab.jail, 'leave.sh'), `sleep 300 &\necho $! > ${pidFile}\necho left`);
    const t = await terminal(lab, { mode: 'whitelist', allow: [s], deny: [] }, ['--timeout', '20000']);
    const started = Date.now();
    const r = await t.call('run_command', { command: './leave.sh' });
    expect(r).toMatchObject({ code: 'OK', stdout: 'left\n', exit_code: 0 });
    // The orphan held our stdout pipe open; killing the group is also what lets the call return now.
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(await waitFor(() => deadOrZombie(Number(fs.readFileSync(pidFile, 'utf8'))))).toBe(true);
  });
  it.each(['SIGTERM', 'SIGINT'] as const)(
    'when the terminal itself gets %s mid-call, the running command dies with it',
    async (signal) => {
      const lab = makeLab();
      killLeftovers(lab.jail);
      const pidFile = path.join(lab.jail, 'hold.pid');
      const s = writeScript(path.join(lab.jail, 'hold.sh'), `sleep 300 &\necho $! > ${pidFile}\nsleep 300`);
      const t = await terminal(lab, { mode: 'whitelist', allow: [s], deny: [] }, ['--timeout', '60000']);
      const call = t.call('run_command', { command: './hold.sh' }).catch((e: Error) => e);
      expect(await waitFor(() => fs.existsSync(pidFile) && fs.readFileSync(pidFile, 'utf8').trim() !== '')).toBe(true);
      const pid = Number(fs.readFileSync(pidFile, 'utf8'));
      expect(deadOrZombie(pid)).toBe(false);
      process.kill(t.pid!, signal);
      expect(await waitFor(() => deadOrZombie(pid))).toBe(true);
      expect(await call).toBeInstanceOf(Error);
    },
  );
});

describe('leash terminal: output caps and redaction', () => {
  it('redacts a secret straddling the stdout cap before cutting: no fragment of it leaks', async () => {
    const lab = makeLab();
    const cap = 1024;
    const t = await terminal(lab, policy, ['--max-output-bytes', String(cap)]);
    const key = 'AKIAIOSFODNN7EXAMPLE';
    // echo prints the argument and a newline: the key occupies bytes cap-6 .. cap+14.
    const r = await t.call('run_command', { command: `echo ${'x'.repeat(cap - 6)}${key}${'y'.repeat(40)}` });
    expect(r).toMatchObject({ ok: true, code: 'OUTPUT_TRUNCATED' });
    for (let n = 4; n <= key.length; n++) expect(r.stdout).not.toContain(key.slice(0, n));
    expect(r.stdout).toBe('x'.repeat(cap - 6) + `\n[TRUNCATED: output exceeded ${cap} bytes]`);
    // The command line carried the key too: it is redacted in the audit trail.
    expect(fs.readFileSync(lab.audit, 'utf8')).not.toContain(key);
  });

  it('caps stderr independently, also redacted first', async () => {
    const lab = makeLab();
    const s = writeScript(
      path.join(lab.jail, 'err.sh'),
      `i=0\nwhile [ $i -lt 100 ]; do echo "token=abcd1234efgh$i" 1>&2; i=$((i+1)); done\necho fine`,
    );
    const t = await terminal(lab, { mode: 'whitelist', allow: [s], deny: [] }, ['--max-output-bytes', '300']);
    const r = await t.call('run_command', { command: './err.sh' });
    expect(r).toMatchObject({ code: 'OUTPUT_TRUNCATED', stdout: 'fine\n' });
    expect(r.stderr).toMatch(/\[TRUNCATED: output exceeded 300 bytes\]$/);
    expect(r.stderr).toContain('token=[REDACTED:assignment]');
    expect(r.stderr).not.toMatch(/abcd/);
  });
});

describe('leash terminal: the scrubbed environment', () => {
  it('gives the child only PATH, HOME and LANG, whatever the server was started with', async () => {
    const lab = makeLab();
    const t = await terminal(lab, policy, [], {
      LEASH_SECRET_TOKEN: 'should-not-leak',
      AWS_SECRET_ACCESS_KEY: 'x'.repeat(40),
      LANG: 'C.UTF-8',
    });
    const r = await t.call('run_command', { command: 'env' });
    const vars = Object.fromEntries(
      r.stdout
        .trim()
        .split('\n')
        .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
    );
    expect(Object.keys(vars).sort()).toEqual(['HOME', 'LANG', 'PATH']);
    expect(vars).toEqual({ PATH: '/usr/local/bin:/usr/bin:/bin', HOME: lab.jail, LANG: 'C.UTF-8' });
  });

  it("resolves commands on its own PATH, never the caller's: a planted echo is not run", async () => {
    const lab = makeLab();
    const evil = path.join(lab.base, 'evil-bin');
    fs.mkdirSync(evil);
    const marker = path.join(lab.base, 'hijacked');
    writeScript(path.join(evil, 'echo'), `touch ${marker}`);
    const t = await terminal(lab, policy, [], { PATH: `${evil}:${process.env.PATH ?? '/usr/bin'}` });
    const r = await t.call('run_command', { command: 'echo safe' });
    expect(r).toMatchObject({ code: 'OK', stdout: 'safe\n' });
    expect(r.policy_reason).toMatch(/\/usr\/bin\/echo|\/bin\/echo/);
    expect(fs.existsSync(marker)).toBe(false);
  });
});

describe('leash terminal: the decision log from the policy file', () => {
  it('writes to logging.decisions of the policy when no --decision-log is given', async () => {
    const lab = makeLab();
    const sink = path.join(lab.base, 'from-policy.jsonl');
    lab.writePolicy(policy, { logging: { decisions: sink } });
    const t = await startTerminal(lab, { decisionLog: false });
    await t.call('run_command', { command: 'rm -rf /' });
    expect(readJsonl(sink)).toEqual([
      expect.objectContaining({
        surface: 'commands',
        action: 'block',
        reason: 'not_allowed',
        subject: expect.anything(),
      }),
    ]);
  });
});

describe('leash terminal: start-up refusals', () => {
  function run(args: string[]) {
    requireBuild();
    return spawnSync(process.execPath, [leashBin, 'terminal', ...args], {
      encoding: 'utf8',
      timeout: 15_000,
      input: '',
    });
  }

  it('requires a jail root', () => {
    const lab = makeLab();
    lab.writePolicy(policy);
    const r = run(['--policy', lab.policyFile, '--audit', lab.audit]);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/--jail/);
  });

  it('refuses a jail root that does not exist', () => {
    const lab = makeLab();
    lab.writePolicy(policy);
    const r = run(['--policy', lab.policyFile, '--jail', path.join(lab.base, 'nope'), '--audit', lab.audit]);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/does not exist/);
  });

  it('refuses an audit log inside the jail, also when reached through a symlink', () => {
    const lab = makeLab();
    lab.writePolicy(policy);
    fs.symlinkSync(lab.jail, path.join(lab.base, 'looks-outside'));
    for (const audit of [path.join(lab.jail, 'audit.jsonl'), path.join(lab.base, 'looks-outside', 'a.jsonl')]) {
      const r = run(['--policy', lab.policyFile, '--jail', lab.jail, '--audit', audit]);
      expect(r.status).toBe(2);
      expect(r.stderr).toMatch(/inside the jail root/);
    }
  });

  it('refuses a policy file inside the jail (the jailed commands could rewrite it)', () => {
    const lab = makeLab();
    const inside = path.join(lab.jail, 'policy.yaml');
    fs.writeFileSync(inside, 'commands: { mode: blacklist }\n');
    const r = run(['--policy', inside, '--jail', lab.jail, '--audit', lab.audit]);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/policy file .* inside the jail root/);
  });

  it('refuses to start when the audit trail cannot be opened (fail closed), unless fail-open', () => {
    const lab = makeLab();
    lab.writePolicy(policy);
    const audit = path.join(lab.base, 'no-such-dir', 'audit.jsonl');
    const r = run(['--policy', lab.policyFile, '--jail', lab.jail, '--audit', audit]);
    expect(r.status).toBe(3);
    expect(r.stderr).toMatch(/cannot be opened: ENOENT/);
    const open = run(['--policy', lab.policyFile, '--jail', lab.jail, '--audit', audit, '--audit-fail-open']);
    expect(open.status).toBe(0);
    expect(open.stderr).toMatch(/running anyway/);
  });

  it('refuses a decision log on stdout (it carries the protocol)', () => {
    const lab = makeLab();
    lab.writePolicy(policy);
    const r = run(['--policy', lab.policyFile, '--jail', lab.jail, '--audit', lab.audit, '--decision-log', 'stdout']);
    expect(r.status).toBe(2);
    expect(r.stdout).toBe('');
  });

  it('tells a missing policy (config_missing) from an invalid one (config_invalid, path: message)', () => {
    const lab = makeLab();
    const missing = run(['--policy', path.join(lab.base, 'none.yaml'), '--jail', lab.jail, '--audit', lab.audit]);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toMatch(/cannot be read/);
    lab.writePolicy({ mode: 'whitelist', alow: ['ls'] });
    const invalid = run(['--policy', lab.policyFile, '--jail', lab.jail, '--audit', lab.audit]);
    expect(invalid.status).toBe(2);
    expect(invalid.stderr).toMatch(/^ {2}commands\.alow: unknown key$/m);
  });

  it('refuses to start without --policy when the service cannot be asked', () => {
    const lab = makeLab();
    const r = run(['--jail', lab.jail, '--audit', lab.audit, '--socket', path.join(lab.base, 'absent.sock')]);
    expect(r.status).toBe(3);
    expect(r.stderr).toMatch(/policy service/);
  });
});

describe('leash terminal: policy from the service (no --policy)', () => {
  async function fakeService(lab: Lab, reply: () => unknown): Promise<{ sock: string; asked: () => number }> {
    const sock = path.join(lab.base, 'leash.sock');
    let n = 0;
    const server = net.createServer((c) => {
      c.setEncoding('utf8');
      c.once('data', () => {
        n++;
        c.end(JSON.stringify({ seq: 1, ...(reply() as object) }) + '\n');
      });
    });
    await new Promise<void>((r) => server.listen(sock, r));
    onTestFinished(() => new Promise<void>((r) => server.close(() => r())));
    return { sock, asked: () => n };
  }

  it('judges by the policy the service returns, asking on every call so a reload takes effect', async () => {
    const lab = makeLab();
    let allow = ['echo'];
    const svc = await fakeService(lab, () => ({
      ok: true,
      uid: process.getuid?.(),
      policy: { fail_mode: 'closed', commands: { mode: 'whitelist', allow, deny: [], args: {} } },
    }));
    const t = await startTerminal(lab, { policy: false, args: ['--socket', svc.sock] });
    expect((await t.call('run_command', { command: 'echo via-service' })).stdout).toBe('via-service\n');
    expect((await t.call('run_command', { command: 'ls' })).code).toBe('POLICY_DENIED');
    allow = ['ls'];
    expect((await t.call('run_command', { command: 'echo again' })).code).toBe('POLICY_DENIED');
    expect(svc.asked()).toBeGreaterThanOrEqual(4);
  });

  it('denies everything (no_policy) when the service has no policy for the caller', async () => {
    const lab = makeLab();
    const svc = await fakeService(lab, () => ({ ok: false, error: 'no_policy' }));
    const t = await startTerminal(lab, { policy: false, args: ['--socket', svc.sock] });
    const r = await t.call('run_command', { command: 'echo hi' });
    expect(r.code).toBe('POLICY_DENIED');
    expect(r.policy_reason).toMatch(/no resolved policy/);
    expect(readJsonl(lab.decisions)[0]).toMatchObject({ action: 'block', reason: 'no_policy' });
  });
});

describe('leash terminal: strict stdio framing', () => {
  it('answers garbage, batches and pre-initialize calls with JSON-RPC errors and keeps serving', async () => {
    requireBuild();
    const lab = makeLab();
    lab.writePolicy(policy);
    const child = spawn(
      process.execPath,
      [leashBin, 'terminal', '--jail', lab.jail, '--policy', lab.policyFile, '--audit', lab.audit],
      { stdio: ['pipe', 'pipe', 'ignore'] },
    );
    onTestFinished(() => {
      child.kill('SIGKILL');
    });
    let out = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (d: string) => (out += d));
    const lines = [
      'this is not json',
      '[{"jsonrpc":"2.0","id":1,"method":"ping"}]',
      '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"touch x"}}}',
      '{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}',
      '{"jsonrpc":"2.0","id":4,"method":"no/such"}',
      '{"jsonrpc":"2.0","id":5,"method":"tools/list"}',
    ];
    child.stdin.end(lines.join('\n') + '\n');
    await new Promise((r) => child.on('exit', r));
    const replies = out
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { id: unknown; error?: { code: number }; result?: { tools?: unknown[] } });
    expect(replies.map((r) => [r.id, r.error?.code ?? 'ok'])).toEqual([
      [null, -32700],
      [null, -32600],
      [2, -32600],
      [3, 'ok'],
      [4, -32601],
      [5, 'ok'],
    ]);
    expect(fs.existsSync(path.join(lab.jail, 'x'))).toBe(false);
  });
});
