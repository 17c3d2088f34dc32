/**
 * Approvals on the tools surface, the whole service for real (root, a leash-t… account): `leash mcp` runs as the
 * leashed account in front of a real @modelcontextprotocol/sdk server and is driven by the SDK's client; a call the
 * policy asks about is held by the service's queue while the gate's other calls are answered, and reaches the server
 * only when an approver (`leash approvals` as root) allows it. The server records every call it executes, so its
 * side proves what was relayed.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canRunLab, stopChild, useLab, type LabUser, waitForServiceReady } from '../lab/index.js';
import type { DecisionRecord } from '../../src/log/decisions.js';

const ROOT = path.resolve(__dirname, '../..');
const CLI = path.join(ROOT, 'dist/src/cli/main.js');
const SERVER = path.join(ROOT, 'tests/fixtures/mcp/approvals-server.mjs');
const DEADLINE_S = 4;

function run(argv: string[], env: NodeJS.ProcessEnv = {}): { code: number; out: string; err: string } {
  const r = spawnSync(argv[0]!, argv.slice(1), { env: { ...process.env, ...env }, encoding: 'utf8' });
  return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
}

/** The error a refused call gets (the SDK throws an McpError carrying code and data). */
async function refused(p: Promise<unknown>): Promise<{ code: number; reason: string }> {
  try {
    await p;
  } catch (e) {
    const err = e as { code: number; data?: { reason: string } };
    return { code: err.code, reason: err.data?.reason ?? '' };
  }
  throw new Error('the call was not refused');
}

describe.skipIf(!canRunLab)('approvals: MCP tool calls held for a human (root, the whole service)', () => {
  const lab = useLab('gtl');
  let dir = '';
  let env: NodeJS.ProcessEnv = {};
  let agent: LabUser;
  /** A second account, bound to a profile of rules over operations (the terminal mapping table). */
  let opsAgent: LabUser;
  let svc: ChildProcess | null = null;
  let svcErr = '';
  let followed = '';
  const seen = new Set<string>();
  const decisionsPath = () => path.join(dir, 'decisions.jsonl');
  const record = () => path.join(dir, 'rec', 'received.jsonl');
  const decisions = (): DecisionRecord[] =>
    fs.existsSync(decisionsPath())
      ? fs
          .readFileSync(decisionsPath(), 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as DecisionRecord)
      : [];
  const opsRecord = () => path.join(dir, 'rec-ops', 'received.jsonl');
  /** The commands the server's run_command executed for the second account, in order. */
  const executedOps = (): string[] =>
    fs.existsSync(opsRecord())
      ? fs
          .readFileSync(opsRecord(), 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => (JSON.parse(l) as { args: { command: string } }).args.command)
      : [];
  /** The tool calls the server executed, in order. */
  const executed = (): string[] =>
    fs.existsSync(record())
      ? fs
          .readFileSync(record(), 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => (JSON.parse(l) as { tool: string }).tool)
      : [];
  const leash = (args: string[]) => run([process.execPath, CLI, '-c', path.join(dir, 'leash.yaml'), ...args], env);
  const nextRequest = async (): Promise<{
    id: string;
    uid: number;
    surface: string;
    what: Record<string, unknown>;
  }> => {
    for (let i = 0; i < 300; i++) {
      for (const l of followed.split('\n').filter((x) => x.startsWith('{'))) {
        const ev = JSON.parse(l) as {
          event: string;
          request?: { id: string; uid: number; surface: string; what: Record<string, unknown> };
        };
        if (ev.event === 'request' && ev.request && !seen.has(ev.request.id)) {
          seen.add(ev.request.id);
          return ev.request;
        }
      }
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`no request reached the approver: ${followed}\n${svcErr.slice(-2000)}`);
  };
  const linesOf = (request: string) => decisions().filter((d) => d.approval?.request === request);

  /** A gate as the leashed account (its UID is what the service knows it by), driven by the SDK client. */
  const connect = async (as: LabUser = agent, rec: string = record(), serverArgs: string[] = []) => {
    const transport = new StdioClientTransport({
      command: 'setpriv',
      args: [
        `--reuid=${as.uid}`,
        `--regid=${as.gid}`,
        '--clear-groups',
        process.execPath,
        CLI,
        'mcp',
        '--socket',
        env.LEASH_TOOLS_SOCKET!,
        '--',
        process.execPath,
        SERVER,
        ...serverArgs,
      ],
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: dir, FAKE_RECORD: rec },
      stderr: 'pipe',
    });
    const client = new Client({ name: 'leash-approvals-e2e', version: '1.0.0' });
    await client.connect(transport);
    lab.get().defer('close the MCP client', () => client.close());
    return client;
  };

  beforeAll(async () => {
    if (!fs.existsSync(CLI)) throw new Error(`the CLI is not built (${CLI}): npm run build`);
    const l = lab.get();
    dir = fs.mkdtempSync(path.join(l.dir, 'gtl-'));
    fs.chmodSync(dir, 0o755);
    agent = await l.createUser('leash-tgt1');
    opsAgent = await l.createUser('leash-tgt2');
    fs.mkdirSync(path.join(dir, 'rec'));
    fs.chownSync(path.join(dir, 'rec'), agent.uid, agent.gid);
    fs.mkdirSync(path.join(dir, 'rec-ops'));
    fs.chownSync(path.join(dir, 'rec-ops'), opsAgent.uid, opsAgent.gid);
    fs.writeFileSync(
      path.join(dir, 'passwd'),
      `root:x:0:0:root:/root:/bin/bash\n${agent.name}:x:${agent.uid}:${agent.gid}::/nonexistent:/usr/sbin/nologin\n` +
        `${opsAgent.name}:x:${opsAgent.uid}:${opsAgent.gid}::/nonexistent:/usr/sbin/nologin\n`,
    );
    fs.writeFileSync(
      path.join(dir, 'leash.yaml'),
      `user: null
fail_mode: closed
network: { mode: blacklist }
filesystem: { mode: blacklist }
commands: { mode: blacklist }
tools: { mode: whitelist, allow: [echo, mutate], ask: [run_shell, deploy] }
enforcers: { network: false, filesystem: false, tools: true }
approvals: { deadlines: { tools: ${DEADLINE_S} } }
logging: { level: info, decisions: ${decisionsPath()}, allows: all }
`,
    );
    env = {
      LEASH_STATE_DIR: path.join(dir, 'state'),
      LEASH_PASSWD: path.join(dir, 'passwd'),
      LEASH_PID_FILE: path.join(dir, 'leash.pid'),
      LEASH_APPROVALS_SOCKET: path.join(dir, 'approvals.sock'),
      LEASH_TOOLS_SOCKET: path.join(dir, 'tools.sock'),
    };
    // The second account's profile: rules over operations read through the terminal table; `rm` asks, `ls` passes,
    // anything else is denied. Bound with the acknowledgements the loosening needs.
    fs.writeFileSync(
      path.join(dir, 'ops.yaml'),
      `tools:
  mapping: terminal
  default: deny
  rules:
    - { id: rm-ask, effect: ask, operations: [shell.exec], commands: [[rm, '**']] }
    - { id: ls-ok, effect: allow, operations: [shell.exec], commands: [[ls, '**']] }
`,
    );
    expect(leash(['profile', 'save', 'ops', '--from', path.join(dir, 'ops.yaml')]).code).toBe(0);
    const bind = leash(['bind', `agent:${opsAgent.name}`, 'ops', '--no-reconcile', '--json']);
    const missing =
      bind.code === 0
        ? []
        : (JSON.parse(bind.out) as { error: { details: { missing: string[] } } }).error.details.missing;
    const bound = leash([
      'bind',
      `agent:${opsAgent.name}`,
      'ops',
      '--no-reconcile',
      ...missing.flatMap((t) => ['--ack', t]),
    ]);
    expect(bound.code, bound.out + bound.err).toBe(0);
    svc = spawn('timeout', ['-s', 'KILL', '300', process.execPath, CLI, '-c', path.join(dir, 'leash.yaml')], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    const s = svc;
    l.defer('stop leash service', () => stopChild(s, 10_000));
    svc.stderr!.setEncoding('utf8').on('data', (d: string) => (svcErr += d));
    await waitForServiceReady(svc, () => svcErr);
  }, 120_000);

  afterAll(async () => {
    if (svc && svc.exitCode === null) await stopChild(svc, 10_000);
  }, 60_000);

  it('with no approver subscribed an asked call is refused at once (approval_unavailable); the server never sees it', async () => {
    const c = await connect();
    const t0 = Date.now();
    expect(await refused(c.callTool({ name: 'run_shell', arguments: { cmd: 'id' } }))).toEqual({
      code: -32001,
      reason: 'approval_unavailable',
    });
    expect(Date.now() - t0).toBeLessThan(1500);
    expect(executed()).not.toContain('run_shell');
    expect(decisions().at(-1)).toMatchObject({
      uid: agent.uid,
      surface: 'tools',
      action: 'block',
      reason: 'approval_unavailable',
      rule: 'run_shell',
      approval: { request: null },
    });
    await c.close();
  });

  it('a held call waits while another call on the same gate is answered; allowed once it is relayed, and the next one asks again', async () => {
    const follower = spawn(process.execPath, [CLI, 'approvals', '--follow', '--json'], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    lab.get().defer('stop approvals follower', () => stopChild(follower, 2000));
    follower.stdout!.setEncoding('utf8').on('data', (d: string) => (followed += d));
    follower.stderr!.setEncoding('utf8').on('data', (d: string) => (followed += d));
    for (let i = 0; i < 100 && leash(['approvals', '--json']).code !== 0; i++)
      await new Promise((r) => setTimeout(r, 50));
    await new Promise((r) => setTimeout(r, 300));

    const c = await connect();
    const held = c.callTool({ name: 'run_shell', arguments: { cmd: 'make test' } });
    const req = await nextRequest();
    expect(req).toMatchObject({
      uid: agent.uid,
      surface: 'tools',
      what: { name: 'run_shell', arguments: { cmd: 'make test' } },
    });
    // The other call flows while this one is held.
    const echo = (await c.callTool({ name: 'echo', arguments: { text: 'meanwhile' } })) as {
      content: { text: string }[];
    };
    expect(echo.content[0]!.text).toBe('meanwhile');
    expect(executed()).toEqual(['echo']);
    const d = leash(['approvals', 'allow', req.id, '--once', '--json']);
    expect(d.code, d.err).toBe(0);
    const r = (await held) as { content: { text: string }[] };
    expect(r.content[0]!.text).toBe('ran make test');
    expect(executed()).toEqual(['echo', 'run_shell']);
    const mine = linesOf(req.id);
    expect(mine.map((x) => [x.uid, x.action, x.reason])).toEqual([
      [agent.uid, 'ask', 'ask_entry'],
      [agent.uid, 'allow', 'approved_once'],
    ]);
    expect(mine[0]!.rule).toBe('run_shell');
    expect(mine[1]!.approval).toMatchObject({ how: 'once', by: { uid: 0 } });

    // Once is once: the next call asks again, and denied it never reaches the server.
    const again = c.callTool({ name: 'run_shell', arguments: { cmd: 'cat notes' } });
    const req2 = await nextRequest();
    expect(req2.id).not.toBe(req.id);
    expect(leash(['approvals', 'deny', req2.id]).code).toBe(0);
    expect(await refused(again)).toEqual({ code: -32001, reason: 'approval_denied' });
    expect(executed()).toEqual(['echo', 'run_shell']);
    expect(linesOf(req2.id).at(-1)).toMatchObject({
      action: 'block',
      reason: 'approval_denied',
      approval: { how: 'deny', by: { uid: 0 } },
    });
    await c.close();
  });

  it('a deadline that passes is a refusal (approval_timeout), never an allow', async () => {
    const c = await connect();
    const t0 = Date.now();
    const p = c.callTool({ name: 'run_shell', arguments: { cmd: 'sleep' } });
    const req = await nextRequest();
    expect(await refused(p)).toEqual({ code: -32001, reason: 'approval_timeout' });
    expect(Date.now() - t0).toBeGreaterThan(DEADLINE_S * 1000 - 500);
    expect(executed().filter((t) => t === 'run_shell')).toHaveLength(1);
    expect(linesOf(req.id).map((x) => [x.action, x.reason])).toEqual([
      ['ask', 'ask_entry'],
      ['block', 'approval_timeout'],
    ]);
    await c.close();
  });

  it('a held call the client cancels (notifications/cancelled) leaves the queue at once and never reaches the server', async () => {
    const c = await connect();
    const ran = executed().length;
    const ac = new AbortController();
    const p = c.callTool({ name: 'run_shell', arguments: { cmd: 'cancel me' } }, undefined, { signal: ac.signal });
    const req = await nextRequest();
    // The SDK sends notifications/cancelled for the call's id and gives up on it.
    ac.abort();
    await expect(p).rejects.toThrow();
    let listed = true;
    for (let i = 0; i < 100 && listed; i++) {
      const l = leash(['approvals', '--json']);
      expect(l.code, l.err).toBe(0);
      listed = l.out.includes(req.id);
      if (listed) await new Promise((r) => setTimeout(r, 50));
    }
    expect(listed, `${req.id} still pending after the cancel`).toBe(false);
    // An approval that comes after the cancel finds nothing to let through.
    const late = leash(['approvals', 'allow', req.id, '--once', '--json']);
    expect(late.code).not.toBe(0);
    expect(late.out + late.err).toMatch(/approval_not_found/);
    expect(linesOf(req.id).map((x) => [x.action, x.reason])).toEqual([
      ['ask', 'ask_entry'],
      ['block', 'approval_cancelled'],
    ]);
    // The gate goes on: the next call is answered, and the cancelled one was never executed.
    const echo = (await c.callTool({ name: 'echo', arguments: { text: 'after the cancel' } })) as {
      content: { text: string }[];
    };
    expect(echo.content[0]!.text).toBe('after the cancel');
    expect(executed().slice(ran)).toEqual(['echo']);
    await c.close();
  });

  it('a session approval passes later calls until the server changes the tool schema; then it asks again', async () => {
    const c = await connect();
    await c.listTools();
    const p = c.callTool({ name: 'run_shell', arguments: { cmd: 'ls' } });
    const req = await nextRequest();
    expect(leash(['approvals', 'allow', req.id, '--session']).code).toBe(0);
    await p;
    expect(linesOf(req.id).at(-1)).toMatchObject({
      action: 'allow',
      reason: 'approved_session',
      approval: { how: 'session' },
    });
    // Within the session: passes without a request, logged as approved_session with the request that granted it.
    const n = seen.size;
    await c.callTool({ name: 'run_shell', arguments: { cmd: 'pwd' } });
    expect(decisions().at(-1)).toMatchObject({
      uid: agent.uid,
      action: 'allow',
      reason: 'approved_session',
      approval: { request: req.id, how: 'session', by: { uid: 0 } },
    });
    // The same schema listed again keeps it.
    await c.listTools();
    await c.callTool({ name: 'run_shell', arguments: { cmd: 'pwd' } });
    expect(seen.size).toBe(n);
    // The server changes run_shell's definition; the client lists again and the session is dropped (logged).
    await c.callTool({ name: 'mutate', arguments: {} });
    const listed = await c.listTools();
    expect(listed.tools.find((t) => t.name === 'run_shell')!.inputSchema.properties).toHaveProperty('cwd');
    for (let i = 0; i < 100 && !svcErr.includes('tools session approval dropped'); i++)
      await new Promise((r) => setTimeout(r, 20));
    expect(svcErr).toContain('tools session approval dropped');
    const p2 = c.callTool({ name: 'run_shell', arguments: { cmd: 'ls' } });
    const req2 = await nextRequest();
    expect(leash(['approvals', 'allow', req2.id, '--once']).code).toBe(0);
    await p2;
    expect(linesOf(req2.id).map((x) => x.reason)).toEqual(['ask_entry', 'approved_once']);
    expect(executed().filter((t) => t === 'run_shell')).toHaveLength(5);
    await c.close();
  });

  it('a session ends with the gate: a new gate asks again', async () => {
    const c = await connect();
    const p = c.callTool({ name: 'run_shell', arguments: { cmd: 'ls' } });
    const req = await nextRequest();
    expect(leash(['approvals', 'allow', req.id, '--session']).code).toBe(0);
    await p;
    await c.close();
    const c2 = await connect();
    const p2 = c2.callTool({ name: 'run_shell', arguments: { cmd: 'ls' } });
    const req2 = await nextRequest();
    expect(leash(['approvals', 'deny', req2.id]).code).toBe(0);
    expect(await refused(p2)).toEqual({ code: -32001, reason: 'approval_denied' });
    await c2.close();
  });

  it('persist writes the tool name into the agent profile through consent; the next call passes as allow_entry', async () => {
    const c = await connect();
    const p = c.callTool({ name: 'run_shell', arguments: { cmd: 'ls' } });
    const req = await nextRequest();
    expect(req).toHaveProperty('persist', 'run_shell');
    const before = (svcErr.match(/"msg":"reconciled"/g) ?? []).length;
    const d = leash(['approvals', 'allow', req.id, '--persist']);
    expect(d.code, d.err + d.out).toBe(0);
    await p;
    for (let i = 0; i < 200 && (svcErr.match(/"msg":"reconciled"/g) ?? []).length <= before; i++)
      await new Promise((r) => setTimeout(r, 50));
    const bindings = fs.readFileSync(path.join(env.LEASH_STATE_DIR!, 'bindings.yaml'), 'utf8');
    expect(bindings).toContain(`agent:${agent.name}`);
    expect(bindings).toContain('tools.allow:run_shell');
    await c.close();
    const c2 = await connect();
    const n = seen.size;
    await c2.callTool({ name: 'run_shell', arguments: { cmd: 'ls' } });
    expect(decisions().at(-1)).toMatchObject({
      uid: agent.uid,
      action: 'allow',
      reason: 'allow_entry',
      rule: 'run_shell',
    });
    expect(seen.size).toBe(n);
    await c2.close();
  });

  // Last: it stops the service.
  it('an operations rule with effect ask holds the call in the service queue while an allowed operation flows', async () => {
    // The terminal table's server runs a command without `cwd` in its --jail (leash terminal's own option): the
    // stand-in names one, so the gate's model knows where such a command runs.
    const c = await connect(opsAgent, opsRecord(), ['--jail', dir]);
    const held = c.callTool({ name: 'run_command', arguments: { command: 'rm -rf build' } });
    const req = await nextRequest();
    expect(req).toMatchObject({
      uid: opsAgent.uid,
      surface: 'tools',
      what: { name: 'run_command', arguments: { command: 'rm -rf build' } },
    });
    // An allow rule's call is answered while the asked one is held; nothing asked reached the server.
    const ls = (await c.callTool({ name: 'run_command', arguments: { command: 'ls -l' } })) as {
      content: { text: string }[];
    };
    expect(ls.content[0]!.text).toBe('ran ls -l');
    expect(executedOps()).toEqual(['ls -l']);
    expect(leash(['approvals', 'allow', req.id, '--once']).code).toBe(0);
    expect(((await held) as { content: { text: string }[] }).content[0]!.text).toBe('ran rm -rf build');
    expect(executedOps()).toEqual(['ls -l', 'rm -rf build']);
    const mine = linesOf(req.id);
    expect(mine.map((x) => [x.uid, x.action, x.reason, x.rule])).toEqual([
      [opsAgent.uid, 'ask', 'ask_rule', 'rm-ask'],
      [opsAgent.uid, 'allow', 'approved_once', 'rm-ask'],
    ]);
    // Once is once: the next rm asks again and, denied, never reaches the server; a command no rule allows is
    // denied at once by the default, never asked.
    const again = c.callTool({ name: 'run_command', arguments: { command: 'rm notes' } });
    const req2 = await nextRequest();
    expect(req2.id).not.toBe(req.id);
    expect(leash(['approvals', 'deny', req2.id]).code).toBe(0);
    expect(await refused(again)).toEqual({ code: -32001, reason: 'approval_denied' });
    expect((await refused(c.callTool({ name: 'run_command', arguments: { command: 'curl x' } }))).reason).toBe(
      'operation_default_denied',
    );
    expect(followed).not.toContain('curl x');
    expect(executedOps()).toEqual(['ls -l', 'rm -rf build']);
    await c.close();
  });

  it('the service stopped with a call held: the call is refused, never allowed, and the server never sees it', async () => {
    const c = await connect();
    const ran = executed().length;
    const p = c.callTool({ name: 'deploy', arguments: { target: 'prod' } });
    const req = await nextRequest();
    expect(req).toMatchObject({ uid: agent.uid, surface: 'tools', what: { name: 'deploy' } });
    const s = svc!;
    const exited = new Promise<void>((r) => (s.exitCode !== null ? r() : s.once('exit', () => r())));
    s.kill('SIGTERM'); // timeout(1) passes it on to the service
    expect(await refused(p)).toEqual({ code: -32001, reason: 'approval_cancelled' });
    await exited;
    expect(executed().slice(ran)).toEqual([]);
    expect(linesOf(req.id).map((x) => [x.action, x.reason])).toEqual([
      ['ask', 'ask_entry'],
      ['block', 'approval_cancelled'],
    ]);
    await c.close().catch(() => undefined);
  });
});
