import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { makeLab, readJsonl, startTerminal, writeScript, type Lab } from './helpers/terminal-lab.js';

const basePolicy = {
  mode: 'whitelist',
  allow: ['echo', 'ls', 'cat', 'git', 'pwd', 'touch', 'nosuchcommand-leash', 'yes', 'sleep'],
  deny: ['rm'],
  args: { git: { deny_args: ['push --force', 'push -f'], reason: 'force-push rewrites shared history' } },
};

async function terminal(lab: Lab, commands: Record<string, unknown> = basePolicy, args: string[] = []) {
  lab.writePolicy(commands);
  return startTerminal(lab, { args });
}

describe('leash terminal: MCP surface', () => {
  it('lists exactly run_command and explain_command with input and output schemas', async () => {
    const t = await terminal(makeLab());
    const { tools } = await t.client.listTools();
    expect(tools.map((x) => x.name).sort()).toEqual(['explain_command', 'run_command']);
    for (const tool of tools) {
      expect(tool.inputSchema.required).toEqual(['command']);
      expect(tool.outputSchema?.required).toContain('policy_reason');
    }
    await expect(t.client.ping()).resolves.toBeDefined();
  });

  it('answers an unknown tool and bad arguments with protocol errors, not by running anything', async () => {
    const t = await terminal(makeLab());
    await expect(t.client.callTool({ name: 'shell', arguments: { command: 'ls' } })).rejects.toThrow(/Unknown tool/);
    await expect(t.client.callTool({ name: 'run_command', arguments: { command: 7 } })).rejects.toThrow(/command/);
    await expect(t.client.callTool({ name: 'run_command', arguments: { command: 'ls', env: 'x' } })).rejects.toThrow(
      /unknown argument/,
    );
  });
});

describe('leash terminal: one test per result code', () => {
  it('OK: runs an allowed command and returns its output, exit code and the deciding entry', async () => {
    const t = await terminal(makeLab());
    const r = await t.call('run_command', { command: 'echo hello   "big world"' });
    expect(r).toMatchObject({ ok: true, code: 'OK', stdout: 'hello big world\n', stderr: '', exit_code: 0 });
    expect(r.policy_reason).toMatch(/allow entry 'echo'/);
  });

  it('OK with a failing exit code: the command ran, ok stays true', async () => {
    const t = await terminal(makeLab());
    const r = await t.call('run_command', { command: 'ls /nonexistent-leash-dir' });
    expect(r).toMatchObject({ ok: true, code: 'OK', exit_code: 2 });
    expect(r.stderr).toContain('No such file');
  });

  it('POLICY_DENIED: a deny entry wins and the command does not run', async () => {
    const lab = makeLab();
    const victim = path.join(lab.jail, 'victim');
    fs.writeFileSync(victim, 'keep');
    const t = await terminal(lab, { ...basePolicy, allow: [...basePolicy.allow, 'rm'] });
    const r = await t.call('run_command', { command: 'rm -f victim' });
    expect(r).toMatchObject({ ok: false, code: 'POLICY_DENIED', stdout: '', exit_code: null });
    expect(r.policy_reason).toMatch(/deny entry 'rm'/);
    expect(fs.existsSync(victim)).toBe(true);
  });

  it('POLICY_DENIED: a command not on the allow list (deny by default) does not run', async () => {
    const lab = makeLab();
    const t = await terminal(lab);
    const r = await t.call('run_command', { command: 'mkdir made' });
    expect(r.code).toBe('POLICY_DENIED');
    expect(r.policy_reason).toMatch(/not on the allow list/);
    expect(fs.existsSync(path.join(lab.jail, 'made'))).toBe(false);
  });

  it('PARSE_ERROR: a shell metacharacter is refused and nothing after it runs', async () => {
    const lab = makeLab();
    const t = await terminal(lab);
    const r = await t.call('run_command', { command: 'echo hi; touch pwned' });
    expect(r).toMatchObject({ ok: false, code: 'PARSE_ERROR', exit_code: null });
    expect(fs.existsSync(path.join(lab.jail, 'pwned'))).toBe(false);
  });

  it('TIMEOUT: a command past the wall-clock limit is killed', async () => {
    const t = await terminal(makeLab(), basePolicy, ['--timeout', '700']);
    const started = Date.now();
    const r = await t.call('run_command', { command: 'sleep 30' });
    expect(r).toMatchObject({ ok: false, code: 'TIMEOUT' });
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('OUTPUT_TRUNCATED: endless output is cut at the cap with a marker, and the command is stopped', async () => {
    const t = await terminal(makeLab(), basePolicy, ['--max-output-bytes', '1000', '--timeout', '20000']);
    const started = Date.now();
    const r = await t.call('run_command', { command: 'yes leash' });
    expect(r).toMatchObject({ ok: true, code: 'OUTPUT_TRUNCATED' });
    expect(r.stdout.startsWith('leash\nleash\n')).toBe(true);
    expect(r.stdout).toMatch(/\[TRUNCATED: output exceeded 1000 bytes\]$/);
    expect(Buffer.byteLength(r.stdout)).toBeLessThan(1100);
    expect(Date.now() - started).toBeLessThan(15_000);
  });

  it('CWD_ESCAPE: a cwd outside the jail is refused', async () => {
    const t = await terminal(makeLab());
    const r = await t.call('run_command', { command: 'cat /etc/hostname', cwd: '/etc' });
    expect(r).toMatchObject({ ok: false, code: 'CWD_ESCAPE', stdout: '' });
  });

  it('EXEC_ERROR: an allowed command that cannot be executed', async () => {
    const lab = makeLab();
    fs.writeFileSync(path.join(lab.jail, 'data.txt'), 'not a program');
    const t = await terminal(lab, { ...basePolicy, allow: [...basePolicy.allow, path.join(lab.jail, 'data.txt')] });
    const missing = await t.call('run_command', { command: 'nosuchcommand-leash' });
    expect(missing).toMatchObject({ ok: false, code: 'EXEC_ERROR', exit_code: null });
    expect(missing.policy_reason).toMatch(/not found on PATH/);
    const notExec = await t.call('run_command', { command: './data.txt' });
    expect(notExec.code).toBe('EXEC_ERROR');
  });

  it('AUDIT_UNAVAILABLE: when the attempt record cannot be written the command does not run', async () => {
    const lab = makeLab();
    lab.writePolicy(basePolicy);
    const t = await startTerminal({ ...lab, audit: '/dev/full' });
    const r = await t.call('run_command', { command: 'touch should-not-exist' });
    expect(r).toMatchObject({ ok: false, code: 'AUDIT_UNAVAILABLE', exit_code: null });
    expect(fs.existsSync(path.join(lab.jail, 'should-not-exist'))).toBe(false);
    expect(t.stderr()).toMatch(/fail closed/);
  });

  it('INTERNAL_ERROR: an unexpected failure reaches the client as a generic envelope without a stack', async () => {
    const lab = makeLab();
    lab.writePolicy(basePolicy);
    const t = await startTerminal(lab, { env: { LEASH_TERMINAL_TEST_FAULT: 'run' } });
    const r = await t.call('run_command', { command: 'echo hi' });
    expect(r).toMatchObject({ ok: false, code: 'INTERNAL_ERROR', stdout: '', stderr: '', exit_code: null });
    expect(r.policy_reason).toMatch(/^internal error \(ref [0-9a-f]{8}\)$/);
    const wire = JSON.stringify(r);
    expect(wire).not.toMatch(/\bat |\.js:|\.ts:|Error/);
    // The server keeps serving.
    expect((await t.call('explain_command', { command: 'echo hi' })).code).toBe('OK');
  });
});

describe('leash terminal: deny_args, spacing and case', () => {
  it.each([
    'git push --force',
    'git push  --force',
    'git\tpush --force',
    'git --force push',
    'git push origin main --force',
    'git push --FORCE',
    'git PUSH --Force',
    'git push "--force"',
    "git 'push' --force",
    'git push --force=true',
    'git push --forc',
    'git push -f',
    'git push -uf origin',
    'git -c core.x=y push -F',
  ])('denies %j by deny_args, in explain and in run', async (command) => {
    const t = await terminal(makeLab());
    for (const tool of ['explain_command', 'run_command'] as const) {
      const r = await t.call(tool, { command });
      expect(r.code).toBe('POLICY_DENIED');
      expect(r.policy_reason).toMatch(/deny_args 'push (--force|-f)' of 'git': force-push rewrites shared history/);
    }
  });

  it.each(['git push', 'git push origin main', 'git status'])('does not deny %j by deny_args', async (command) => {
    const t = await terminal(makeLab());
    expect((await t.call('explain_command', { command })).code).toBe('OK');
  });

  it.each(['GIT status', 'Echo hi', 'ECHO hi', 'eCho hi'])(
    'treats %j as a different, unknown binary (Linux names are case-sensitive) and denies it',
    async (command) => {
      const t = await terminal(makeLab());
      const r = await t.call('run_command', { command });
      expect(r.code).toBe('POLICY_DENIED');
      expect(r.policy_reason).toMatch(/not on the allow list/);
    },
  );

  it('judges an absolute path by the file it names: /usr/bin/echo matches the echo entry, /usr/bin/rm the deny', async () => {
    const t = await terminal(makeLab());
    expect((await t.call('run_command', { command: '/usr/bin/echo x' })).code).toBe('OK');
    expect((await t.call('run_command', { command: '/usr/bin/../bin/rm x' })).code).toBe('POLICY_DENIED');
  });

  it('does not let a program saved in the jail under an allowed name run (basename entries mean PATH binaries)', async () => {
    const lab = makeLab();
    fs.writeFileSync(path.join(lab.jail, 'keep'), 'x');
    // What a model could produce with an allowed copying tool: rm's code under the name ls.
    fs.copyFileSync('/usr/bin/rm', path.join(lab.jail, 'ls'));
    fs.chmodSync(path.join(lab.jail, 'ls'), 0o755);
    const t = await terminal(lab);
    const r = await t.call('run_command', { command: './ls keep' });
    expect(r.code).toBe('POLICY_DENIED');
    expect(r.policy_reason).toMatch(/admits only a binary in the terminal's PATH/);
    expect(fs.existsSync(path.join(lab.jail, 'keep'))).toBe(true);
    expect((await t.call('run_command', { command: 'ls' })).stdout).toBe('keep\nls\n');
    expect(readJsonl(lab.decisions).map((d) => d.reason)).toEqual(['not_on_path', 'allow_entry']);
  });

  it('judges the real file behind a symlink in the jail, not the name it was given', async () => {
    const lab = makeLab();
    fs.writeFileSync(path.join(lab.jail, 'keep'), 'x');
    fs.symlinkSync('/usr/bin/rm', path.join(lab.jail, 'ls'));
    const t = await terminal(lab, { mode: 'blacklist', allow: [], deny: ['rm'] });
    const r = await t.call('run_command', { command: './ls keep' });
    expect(r.code).toBe('POLICY_DENIED');
    expect(r.policy_reason).toContain('/usr/bin/rm');
    expect(fs.existsSync(path.join(lab.jail, 'keep'))).toBe(true);
  });
});

describe('leash terminal: metacharacters never reach a shell', () => {
  it.each([
    ['echo a; touch pwned', ';'],
    ['echo a && touch pwned', '&'],
    ['echo a || touch pwned', '|'],
    ['echo a | touch pwned', '|'],
    ['touch pwned &', '&'],
    ['echo a > pwned', '>'],
    ['echo a >> pwned', '>'],
    ['cat < /etc/shadow', '<'],
    ['echo `touch pwned`', '`'],
    ['echo $(touch pwned)', '$('],
    ['echo "$(touch pwned)"', '$('],
    ["echo '; touch pwned'", ';'],
    ['echo ${IFS}touch', '${'],
    ['echo a\ntouch pwned', 'newline'],
    ['echo a\r\ntouch pwned', 'newline'],
    ['touch\u00a0pwned', 'U+00A0'],
  ])('refuses %j with PARSE_ERROR, creating nothing', async (command, what) => {
    const lab = makeLab();
    const t = await terminal(lab);
    for (const tool of ['run_command', 'explain_command'] as const) {
      const r = await t.call(tool, { command });
      expect(r.code).toBe('PARSE_ERROR');
      expect(r.policy_reason).toContain(what);
    }
    expect(fs.readdirSync(lab.jail)).toEqual([]);
  });

  it('passes $VAR, globs and ~ through literally (nothing expands them)', async () => {
    const lab = makeLab();
    fs.writeFileSync(path.join(lab.jail, 'a.txt'), '');
    const t = await terminal(lab);
    const r = await t.call('run_command', { command: 'echo $HOME *.txt ~' });
    expect(r.stdout).toBe('$HOME *.txt ~\n');
  });
});

describe('leash terminal: explain_command', () => {
  it('returns the run verdict without executing anything', async () => {
    const lab = makeLab();
    const t = await terminal(lab);
    const ok = await t.call('explain_command', { command: 'touch made-by-explain' });
    expect(ok).toMatchObject({ ok: true, code: 'OK', stdout: '', stderr: '', exit_code: null, duration_ms: 0 });
    expect(ok.policy_reason).toMatch(/allow entry 'touch'/);
    expect(fs.existsSync(path.join(lab.jail, 'made-by-explain'))).toBe(false);
    expect(await t.call('explain_command', { command: 'rm -rf /' })).toMatchObject({
      ok: false,
      code: 'POLICY_DENIED',
    });
    expect(readJsonl(lab.audit)).toEqual([]);
  });
});

describe('leash terminal: audit trail and decision log', () => {
  it('writes the attempt record before the command runs and the outcome after', async () => {
    const lab = makeLab();
    const t = await terminal(lab);
    // The command reads the audit trail while it runs: its own attempt record must already be there.
    const r = await t.call('run_command', { command: `cat ${lab.audit}` });
    expect(r.code).toBe('OK');
    const seen = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({
      event: 'attempt',
      decision: 'allow',
      binary: '/usr/bin/cat',
      reason: 'allow_entry',
    });
    const all = readJsonl(lab.audit);
    expect(all.map((x) => x.event)).toEqual(['attempt', 'outcome']);
    expect(all[1]).toMatchObject({ id: seen[0]!.id, code: 'OK', exit_code: 0 });
    expect(all[1]).not.toHaveProperty('stdout');
    // Each record is stamped first with its own time (the outcome's after the command ran).
    for (const rec of all) expect(Object.keys(rec)[0]).toBe('ts');
    const [t0, t1] = all.map((x) => Date.parse(String(x.ts)));
    expect(t0).toBeGreaterThan(Date.now() - 60_000);
    expect(t1).toBeGreaterThanOrEqual(t0!);
  });

  it('records refusals too, and writes every verdict to the decision log under surface commands', async () => {
    const lab = makeLab();
    const t = await terminal(lab);
    await t.call('run_command', { command: 'echo fine' });
    await t.call('run_command', { command: 'git push -f' });
    await t.call('run_command', { command: 'echo x | sh' });
    const audit = readJsonl(lab.audit);
    expect(audit.filter((a) => a.event === 'outcome').map((a) => a.code)).toEqual([
      'OK',
      'POLICY_DENIED',
      'PARSE_ERROR',
    ]);
    const d = readJsonl(lab.decisions);
    expect(d.map((x) => [x.surface, x.action, x.reason])).toEqual([
      ['commands', 'allow', 'allow_entry'],
      ['commands', 'block', 'deny_args'],
      ['commands', 'block', 'parse_error'],
    ]);
    expect(d[1]).toMatchObject({
      rule: 'git: push -f',
      subject: { binary: '/usr/bin/git', argv: ['git', 'push', '-f'] },
    });
    expect(typeof d[0]!.ref).toBe('string');
    expect(audit[0]!.ref).toBe(d[0]!.ref);
  });

  it('redacts secrets in commands before they reach the audit trail or the decision log', async () => {
    const lab = makeLab();
    const t = await terminal(lab);
    const r = await t.call('run_command', { command: 'echo AKIAIOSFODNN7EXAMPLE password=hunter2hunter2' });
    expect(r.stdout).toBe('[REDACTED:aws_access_key] password=[REDACTED:assignment]\n');
    const written = fs.readFileSync(lab.audit, 'utf8') + fs.readFileSync(lab.decisions, 'utf8');
    expect(written).toContain('[REDACTED:aws_access_key]');
    expect(written).not.toContain('AKIAIOSFODNN7EXAMPLE');
    expect(written).not.toContain('hunter2hunter2');
  });

  it("masks what only the engine's detectors know (PII) after the terminal's own patterns", async () => {
    const t = await terminal(makeLab());
    const r = await t.call('run_command', { command: 'echo ghp_' + 'a'.repeat(36) + ' jane.doe@example.com' });
    expect(r.stdout).toMatch(/^\[REDACTED:github_token\] \S+\*\*\*\*/);
    expect(r.stdout).not.toContain('jane.doe@example.com');
  });

  it('fail-open (operator choice) runs the command although the record cannot be written, and warns', async () => {
    const lab = makeLab();
    lab.writePolicy(basePolicy);
    const t = await startTerminal({ ...lab, audit: '/dev/full' }, { args: ['--audit-fail-open'] });
    const r = await t.call('run_command', { command: 'touch made' });
    expect(r.code).toBe('OK');
    expect(fs.existsSync(path.join(lab.jail, 'made'))).toBe(true);
    expect(t.stderr()).toMatch(/running anyway \(--audit-fail-open\)/);
  });

  it('fails closed when the audit directory disappears after start-up', async () => {
    const lab = makeLab();
    const dir = path.join(lab.base, 'auditdir');
    fs.mkdirSync(dir);
    lab.writePolicy(basePolicy);
    const t = await startTerminal({ ...lab, audit: path.join(dir, 'audit.jsonl') });
    expect((await t.call('run_command', { command: 'echo one' })).code).toBe('OK');
    fs.rmSync(dir, { recursive: true });
    const r = await t.call('run_command', { command: 'touch late' });
    expect(r.code).toBe('AUDIT_UNAVAILABLE');
    expect(fs.existsSync(path.join(lab.jail, 'late'))).toBe(false);
  });
});

describe('leash terminal: a script in the jail, allowed by absolute path', () => {
  it('runs the real file it judged, with the jail as cwd', async () => {
    const lab = makeLab();
    const s = writeScript(path.join(lab.jail, 'show.sh'), 'echo "$0 $(pwd)"');
    const t = await terminal(lab, { mode: 'whitelist', allow: [s], deny: [] });
    const r = await t.call('run_command', { command: './show.sh' });
    expect(r).toMatchObject({ code: 'OK', stdout: `${s} ${lab.jail}\n` });
  });
});
