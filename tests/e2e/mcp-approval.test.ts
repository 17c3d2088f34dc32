/**
 * `leash mcp --policy FILE` with a policy that asks, and no service (issue 41): it asks the operator on the
 * controlling terminal (--approval tty), refuses the asks when told to (--approval none), and otherwise does
 * not start, naming what asks. The terminal is a real pseudo-terminal made the gate's controlling terminal
 * (tests/fixtures/mcp/with-tty.py), with the MCP pipes as stdin and stdout, as under an MCP host.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { call, calledTools, CLI, init, ROOT, startGate, tmpdir } from './mcp-helpers.js';

const WITH_TTY = path.join(ROOT, 'tests/fixtures/mcp/with-tty.py');
const POLICY = `
tools:
  mode: whitelist
  allow: [read_file]
  ask: [run_cmd]
`;

describe.skipIf(!fs.existsSync(CLI))('leash mcp: asks without the service', () => {
  it('--approval tty: y allows the call once, n denies it, silence times out; the server sees only the allowed one', async () => {
    const dir = tmpdir();
    const transcript = path.join(dir, 'tty.txt');
    const g = startGate({
      policy: POLICY,
      cliArgs: ['--approval', 'tty', '--approval-timeout', '1500'],
      wrapper: ['python3', WITH_TTY],
      env: { TTY_ANSWERS: 'y,n,wait', TTY_TRANSCRIPT: transcript },
    });
    g.send(init(0));
    await g.answer(0);
    g.send(call(1, 'run_cmd', {}));
    expect((await g.answer(1, 10_000)).result).toBeDefined();
    g.send(call(2, 'run_cmd', {}));
    expect((await g.answer(2, 10_000)).error).toMatchObject({ code: -32001, data: { reason: 'approval_denied' } });
    g.send(call(3, 'run_cmd', {}));
    expect((await g.answer(3, 10_000)).error).toMatchObject({ code: -32001, data: { reason: 'approval_timeout' } });
    // Not asked: the allow entry decides.
    g.send(call(4, 'read_file', {}));
    expect((await g.answer(4, 10_000)).error).toBeUndefined();
    g.end();
    expect(await g.exited).toBe(0);
    expect(calledTools(g)).toEqual(['run_cmd', 'read_file']);
    const lines = g.log().filter((l) => (l.subject as { name?: string }).name === 'run_cmd');
    expect(lines.map((l) => [l.action, l.reason])).toEqual([
      ['allow', 'approved_once'],
      ['block', 'approval_denied'],
      ['block', 'approval_timeout'],
    ]);
    expect(fs.readFileSync(transcript, 'utf8').match(/run_cmd .*\[y\/N\]/g)).toHaveLength(3);
  }, 60_000);

  it('refuses to start a policy that asks when nobody is named to answer: mcp_no_approver, the server never runs', async () => {
    const g = startGate({ policy: POLICY });
    expect(await g.exited).toBe(2);
    expect(g.stderr()).toContain('[mcp_no_approver]');
    expect(g.stderr()).toContain('run_cmd');
    expect(fs.existsSync(g.record)).toBe(false);
  });

  it('--approval tty without a controlling terminal does not start either', async () => {
    // setsid: a new session with no terminal, as a host that detaches its servers.
    const g = startGate({ policy: POLICY, cliArgs: ['--approval', 'tty'], wrapper: ['setsid', '--wait'] });
    expect(await g.exited).toBe(2);
    expect(g.stderr()).toContain('[mcp_no_approver]');
    expect(fs.existsSync(g.record)).toBe(false);
  });

  it('--approval none: asked calls are refused (approval_unavailable), as chosen', async () => {
    const g = startGate({ policy: POLICY, cliArgs: ['--approval', 'none'] });
    g.send(init(0));
    await g.answer(0);
    g.send(call(1, 'run_cmd', {}));
    expect((await g.answer(1)).error).toMatchObject({ code: -32001, data: { reason: 'approval_unavailable' } });
    g.end();
    expect(await g.exited).toBe(0);
    expect(calledTools(g)).toEqual([]);
  });

  it('--approval without --policy is a usage error (the service has its own approvers)', async () => {
    const g = startGate({ policy: null, cliArgs: ['--approval', 'tty'] });
    expect(await g.exited).toBe(2);
    expect(g.stderr()).toContain('[usage]');
  });

  it('a policy that never asks starts as before', async () => {
    const g = startGate({ policy: 'tools: { mode: whitelist, allow: [read_file] }\n' });
    g.send(init(0));
    await g.answer(0);
    g.end();
    expect(await g.exited).toBe(0);
  });
});

describe.skipIf(!fs.existsSync(CLI))('leash doctor --policy: who answers the asks', () => {
  const doctor = (args: string[]) => {
    const r = spawnSync(process.execPath, [CLI, 'doctor', '--json', ...args], { encoding: 'utf8', timeout: 30_000 });
    return {
      code: r.status,
      out: JSON.parse(r.stdout) as {
        ok: boolean;
        checks: { check: string; ok: boolean; code?: string; detail: string }[];
      },
    };
  };

  it('fails, naming the asking rules, when the policy asks and no approver is named', () => {
    const dir = tmpdir();
    const p = path.join(dir, 'tools.yaml');
    const init = spawnSync(process.execPath, [CLI, 'tools', 'policy', 'init', '--recipe', 'filesystem', '--policy', p]);
    expect(init.status).toBe(0);
    const r = doctor(['--policy', p]);
    expect(r.code).toBe(1);
    const a = r.out.checks.find((c) => c.check === 'approval')!;
    expect(a).toMatchObject({ ok: false, code: 'mcp_no_approver' });
    expect(a.detail).toContain('workspace-write');
    expect(doctor(['--policy', p, '--approval', 'none']).code).toBe(0);
  });

  it('passes a policy that never asks', () => {
    const dir = tmpdir();
    const p = path.join(dir, 'tools.yaml');
    fs.writeFileSync(p, 'tools: { mode: whitelist, allow: [read_file] }\n');
    expect(doctor(['--policy', p]).code).toBe(0);
  });
});
