import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { GATE_ENGINE } from '../../src/tools/judge/compile.js';
import { configSchema } from '../../src/control/config/schema.js';
import type { DecisionWriter } from '../../src/log/decisions.js';
import { compileGatePolicy, type CompiledGatePolicy } from '../../src/tools/judge/compile.js';
import { GATE_DEFAULTS } from '../../src/tools/judge/fields.js';
import { connectToolsJudge, createToolsSocketServer } from '../../src/tools/remote/socket.js';
import { nativeAvailable } from '../../src/native.js';
import { call, CLI, FAKE, init, tmpdir } from './mcp-helpers.js';

type Rec = Parameters<DecisionWriter['write']>[0];

function memoryLog(): DecisionWriter & { lines: Rec[] } {
  const lines: Rec[] = [];
  return {
    lines,
    write(rec) {
      lines.push(rec);
      return `r${lines.length}`;
    },
  };
}

const compile = (allow: string[], deny: string[]): CompiledGatePolicy =>
  compileGatePolicy(
    {
      mode: 'whitelist',
      allow,
      deny,
      inspect: { secrets: 'block', pii: 'log', priv_esc: 'block' },
      ...GATE_DEFAULTS,
      hide_denied: true,
    },
    'closed',
    GATE_ENGINE,
  );

describe('tools socket: the service side', () => {
  it('judges against the policy of the UID the kernel reports, and logs under it', async () => {
    const dir = tmpdir();
    const log = memoryLog();
    const seen: number[] = [];
    const srv = await createToolsSocketServer({
      path: path.join(dir, 'tools.sock'),
      log,
      // A stand-in peer lookup: this test runs anywhere; the SO_PEERCRED path is tested below.
      peerUid: () => 4242,
      policyForUid: (uid) => {
        seen.push(uid);
        return uid === 4242 ? compile(['read_file'], ['delete_all']) : null;
      },
    });
    onTestFinished(() => srv.close());
    const judge = await connectToolsJudge(srv.path);
    onTestFinished(() => judge.close?.());
    expect(judge.uid).toBe(4242);
    expect(judge.hideDenied).toBe(true);
    const ok = await judge.judge('tools/call', { name: 'read_file', arguments: { p: 1 } }, false);
    const no = await judge.judge('tools/call', { name: 'delete_all' }, false);
    expect(ok).toMatchObject({ action: 'allow', policed: true });
    expect(no).toMatchObject({ action: 'deny', code: -32001, reason: 'deny_entry' });
    expect(await judge.hidden(['read_file', 'delete_all', 'other'])).toEqual([false, true, true]);
    judge.event({ reason: 'protocol_client', rejected: 'client', code: 'duplicate_key', line: '{"a":1,"a":2}' });
    await new Promise((r) => setTimeout(r, 50));
    expect(seen.every((u) => u === 4242)).toBe(true);
    expect(log.lines.map((l) => [l.uid, l.action, l.reason])).toEqual([
      [4242, 'allow', 'allow_entry'],
      [4242, 'block', 'deny_entry'],
      [4242, 'block', 'protocol_client'],
    ]);
  });

  it('denies every policed call of a subject with no policy', async () => {
    const dir = tmpdir();
    const log = memoryLog();
    const srv = await createToolsSocketServer({
      path: path.join(dir, 's.sock'),
      log,
      peerUid: () => 7,
      policyForUid: () => null,
    });
    onTestFinished(() => srv.close());
    const judge = await connectToolsJudge(srv.path);
    onTestFinished(() => judge.close?.());
    expect(await judge.judge('tools/call', { name: 'anything' }, false)).toMatchObject({
      action: 'deny',
      reason: 'no_policy',
    });
    expect(log.lines[0]).toMatchObject({ uid: 7, action: 'block', reason: 'no_policy' });
  });

  it('drops a peer that sends something that is not strict JSON', async () => {
    const dir = tmpdir();
    const srv = await createToolsSocketServer({
      path: path.join(dir, 'x.sock'),
      log: memoryLog(),
      peerUid: () => 1,
      policyForUid: () => null,
    });
    onTestFinished(() => srv.close());
    const s = net.createConnection(srv.path);
    s.write('{"op":"hello","op":"judge"}\n');
    await new Promise<void>((r) => s.on('close', () => r()));
  });
});

const root = process.getuid?.() === 0;
describe.skipIf(!fs.existsSync(CLI) || !nativeAvailable() || !root)(
  'leash mcp without --policy asks the service (SO_PEERCRED)',
  () => {
    it('a gate run by another account is judged by that account’s policy, read from the kernel', async () => {
      const dir = tmpdir();
      fs.chmodSync(dir, 0o777);
      const log = memoryLog();
      const nobody = 65534;
      const srv = await createToolsSocketServer({
        path: path.join(dir, 'tools.sock'),
        log,
        policyForUid: (uid) => (uid === nobody ? compile(['search'], ['read_file']) : compile(['read_file'], [])),
      });
      onTestFinished(() => srv.close());
      const record = path.join(dir, 'received.jsonl');
      const proc = spawn(process.execPath, [CLI, 'mcp', '--socket', srv.path, '--', process.execPath, FAKE], {
        uid: nobody,
        gid: nobody,
        cwd: dir,
        stdio: ['pipe', 'pipe', 'pipe'],
        env: { ...process.env, FAKE_RECORD: record, HOME: dir },
      });
      onTestFinished(() => {
        if (proc.exitCode === null) proc.kill('SIGKILL');
      });
      let out = '';
      proc.stdout.on('data', (c: Buffer) => (out += c.toString()));
      let err = '';
      proc.stderr.on('data', (c: Buffer) => (err += c.toString()));
      for (const m of [init(0), call(1, 'read_file', { path: '/x' }), call(2, 'search', { q: 'x' })])
        proc.stdin.write(JSON.stringify(m) + '\n');
      const deadline = Date.now() + 10_000;
      while (out.trim().split('\n').filter(Boolean).length < 3 && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 50));
      proc.stdin.end();
      const code = await new Promise<number | null>((r) => proc.on('close', (c) => r(c)));
      expect(code, err).toBe(0);
      const answers = out
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { id: number; error?: { code: number } });
      expect(answers.find((a) => a.id === 1)!.error).toMatchObject({ code: -32001 });
      expect(answers.find((a) => a.id === 2)!.error).toBeUndefined();
      const received = fs.readFileSync(record, 'utf8');
      expect(received).not.toContain('read_file');
      expect(received).toContain('search');
      // The service logged under the UID the kernel gave it, not ours.
      expect(log.lines.length).toBeGreaterThanOrEqual(2);
      expect(log.lines.every((l) => l.uid === nobody)).toBe(true);
    });
  },
);

describe.skipIf(!nativeAvailable() || !root)('tools socket of the running service (the reconcile)', () => {
  it('serves each subject its resolved tools and commands policy, and a subject that left discovery none', async () => {
    const { startReconcile } = await import('../../src/control/reconcile/loop.js');
    const { createLogger } = await import('../../src/log/logger.js');
    const { fetchServicePolicy } = await import('../../src/tools/terminal/service-client.js');
    const dir = tmpdir();
    const sock = path.join(dir, 'run', 'tools.sock');
    // Discovery reads this passwd only: root is the configured account, nobody the next one.
    const passwd = path.join(dir, 'passwd');
    fs.writeFileSync(passwd, 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534::/:/usr/sbin/nologin\n');
    process.env.LEASH_PASSWD = passwd;
    onTestFinished(() => {
      delete process.env.LEASH_PASSWD;
    });
    const log = memoryLog();
    // Only the tools surface: this test must not touch the host's firewall or mark its filesystems.
    const config = (user: string) =>
      configSchema.parse({
        user,
        fail_mode: 'closed',
        tools: {
          mode: 'whitelist',
          allow: ['read_file'],
          deny: [],
          inspect: { secrets: 'block', pii: 'log', priv_esc: 'block' },
          args: { read_file: { deny: { '**.path': ['^/etc/'] } } },
        },
        commands: { mode: 'whitelist', allow: ['git'], deny: [], args: { git: { deny_args: ['push --force'] } } },
        enforcers: { network: false, filesystem: false, tools: true },
      });
    const logger = createLogger({ level: 'error' });
    const ctx = (user: string, uid: number) => ({
      loaded: { config: config(user), account: { uid } },
      decisions: log,
      logger,
    });
    const enf = await startReconcile(ctx('root', 0) as never, { stateDir: path.join(dir, 'state'), toolsSocket: sock });
    onTestFinished(() => enf.close());
    const judge = await connectToolsJudge(sock);
    onTestFinished(() => judge.close?.());
    expect(judge.uid).toBe(0);
    expect(await judge.judge('tools/call', { name: 'read_file', arguments: { path: '/srv/x' } }, false)).toMatchObject({
      action: 'allow',
    });
    expect(
      await judge.judge('tools/call', { name: 'read_file', arguments: { path: { $ref: '/etc/x' } } }, false),
    ).toMatchObject({ action: 'deny', reason: 'arg_denied' });
    // What `leash terminal` asks for over the same socket: the caller's commands section, args included.
    expect(await fetchServicePolicy(sock)).toMatchObject({
      fail_mode: 'closed',
      commands: { mode: 'whitelist', allow: ['git'], args: { git: { deny_args: ['push --force'] } } },
    });
    // The configured account becomes nobody: root left discovery, so it has no policy any more.
    await enf.reload(ctx('nobody', 65534).loaded as never);
    expect(await judge.judge('tools/call', { name: 'read_file' }, false)).toMatchObject({
      action: 'deny',
      reason: 'no_policy',
    });
    expect(await fetchServicePolicy(sock)).toBeNull();
    expect(log.lines.every((l) => l.uid === 0)).toBe(true);
  });
});
