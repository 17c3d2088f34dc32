/**
 * Shadow mode and `leash learn`, for real: the service runs inside the lab's agent namespace with one agent account
 * bound to a strict profile in shadow mode. The agent's blocked actions (a TLS connection, a DNS lookup, an open, an
 * exec on a tmpfs this test mounts) succeed and are logged as would_block; `leash learn` turns them into a profile;
 * bound for real (enforce), that profile allows exactly those actions and blocks new ones (EPERM, reset).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB, canRunLab, stopChild, useLab, type LabUser, waitForServiceReady } from '../lab/index.js';
import type { DecisionLine } from '../../src/log/decisions.js';

const CLI = path.resolve(__dirname, '../../dist/src/cli/main.js');

function run(argv: string[], env: NodeJS.ProcessEnv = {}): { code: number; out: string; err: string } {
  const r = spawnSync(argv[0]!, argv.slice(1), { env: { ...process.env, ...env }, encoding: 'utf8' });
  return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
}

describe.skipIf(!canRunLab)('shadow mode and leash learn (root, lab, tmpfs)', () => {
  const lab = useLab('shd');
  let dir = '';
  let mnt = '';
  let env: NodeJS.ProcessEnv = {};
  let u: LabUser;
  let svc: ChildProcess | null = null;
  let svcErr = '';
  const decisionsPath = () => path.join(dir, 'decisions.jsonl');
  const decisions = (): DecisionLine[] =>
    fs.existsSync(decisionsPath())
      ? fs
          .readFileSync(decisionsPath(), 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as DecisionLine)
      : [];
  const cli = (args: string[]) => run([process.execPath, CLI, '-c', path.join(dir, 'leash.yaml'), ...args], env);
  const leash = (args: string[]) => {
    const r = cli([...args, '--no-reconcile']);
    if (r.code !== 0) throw new Error(`leash ${args.join(' ')} -> ${r.code}: ${r.err}${r.out}`);
    return r;
  };
  const hupAndWait = async () => {
    const before = (svcErr.match(/"msg":"reconciled"/g) ?? []).length;
    process.kill(Number(fs.readFileSync(env.LEASH_PID_FILE!, 'utf8')), 'SIGHUP');
    for (let i = 0; i < 200; i++) {
      if ((svcErr.match(/"msg":"reconciled"/g) ?? []).length > before) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`no reconcile after SIGHUP:\n${svcErr.slice(-3000)}`);
  };
  /** Runs a program as the agent inside the agent namespace: 'ok', 'EPERM' (the errno the agent met) or the failure. */
  const asAgent = (argv: string[]) => {
    const r = run([
      'ip',
      'netns',
      'exec',
      lab.get().agentNs,
      'setpriv',
      `--reuid=${u.uid}`,
      `--regid=${u.gid}`,
      '--clear-groups',
      'timeout',
      '10',
      ...argv,
    ]);
    return r.code === 0 ? 'ok' : /Operation not permitted/.test(r.err) ? 'EPERM' : `fail ${r.code} ${r.err.trim()}`;
  };
  const readAs = (file: string) => asAgent(['/bin/cat', file]);
  const execAs = (file: string) => asAgent([file]);
  const tlsAs = async (host: string) => {
    const addr = LAB.hosts.find((h) => h.name === host)!.v4;
    const [res] = await lab.get().probe(u, [{ kind: 'tls', host: addr, port: 443, servername: host }]);
    return res!.ok ? 'ok' : (res!.code ?? 'fail');
  };
  const dnsAs = async (name: string) => {
    const [res] = await lab.get().probe(u, [{ kind: 'dnsudp', server: LAB.dnsV4, name }]);
    return res!.ok ? 'ok' : (res!.code ?? 'fail');
  };
  const linesOf = (from: number) =>
    decisions()
      .slice(from)
      .filter((d) => d.uid === u.uid);
  const has = (ls: DecisionLine[], surface: string, action: string, needle: string) =>
    ls.some((r) => r.surface === surface && r.action === action && JSON.stringify(r.subject).includes(needle));

  beforeAll(async () => {
    const l = lab.get();
    dir = fs.mkdtempSync(path.join(l.dir, 'shd-'));
    fs.chmodSync(dir, 0o755);
    mnt = path.join(dir, 'fs');
    fs.mkdirSync(mnt);
    const m = run(['mount', '-t', 'tmpfs', '-o', 'size=16m,mode=0755', 'leash-test', mnt]);
    if (m.code !== 0) throw new Error(m.err);
    l.defer(`umount ${mnt}`, () => run(['umount', '-l', mnt]));
    for (const d of ['a1', 'a2', 'a3']) {
      fs.mkdirSync(path.join(mnt, d), { mode: 0o755 });
      fs.writeFileSync(path.join(mnt, d, 'f'), `${d}\n`, { mode: 0o644 });
    }
    fs.mkdirSync(path.join(mnt, 'bin'), { mode: 0o755 });
    for (const t of ['t1', 't2']) fs.copyFileSync('/bin/true', path.join(mnt, 'bin', t));
    for (const t of ['t1', 't2']) fs.chmodSync(path.join(mnt, 'bin', t), 0o755);
    u = await l.createUser('leash-tshd1');
    fs.writeFileSync(
      path.join(dir, 'passwd'),
      `root:x:0:0:root:/root:/bin/bash\n${u.name}:x:${u.uid}:${u.gid}::/nonexistent:/usr/sbin/nologin\n`,
    );
    fs.writeFileSync(
      path.join(dir, 'leash.yaml'),
      `user: null
fail_mode: closed
network: { mode: whitelist, allow: [good.lab, evil.lab], deny: [], dns_resolvers: [${LAB.dnsV4}] }
filesystem: { mode: whitelist, allow: [${mnt}], deny: [] }
commands: { mode: whitelist, allow: [${mnt}/bin], deny: [] }
tools: { mode: whitelist, allow: [], deny: [] }
logging: { level: info, decisions: ${decisionsPath()}, allows: all }
`,
    );
    env = {
      LEASH_STATE_DIR: path.join(dir, 'state'),
      LEASH_PASSWD: path.join(dir, 'passwd'),
      LEASH_TOOLS_SOCKET: path.join(dir, 'tools.sock'),
      LEASH_PID_FILE: path.join(dir, 'leash.pid'),
      LEASH_WATCHER_TIMEOUT_S: '300',
    };
    // Strict: nothing on the network, one directory, no command.
    fs.writeFileSync(
      path.join(dir, 'strict.yaml'),
      `network: { allow: [] }\nfilesystem: { allow: [${mnt}/a1] }\ncommands: { allow: [] }\n`,
    );
    leash(['profile', 'save', 'strict', '--from', path.join(dir, 'strict.yaml')]);
    // Shadow is a loosening: refused without its ack (exit 2), bound with it.
    const refused = cli(['bind', `agent:${u.name}`, 'strict', '--enforce', 'shadow', '--no-reconcile', '--json']);
    expect(refused.code, refused.out + refused.err).toBe(2);
    expect(JSON.parse(refused.out)).toMatchObject({
      error: { code: 'loosening_unacknowledged', details: { missing: ['enforce:shadow'] } },
    });
    leash(['bind', `agent:${u.name}`, 'strict', '--enforce', 'shadow', '--ack', 'enforce:shadow']);

    svc = spawn(
      'ip',
      [
        'netns',
        'exec',
        l.agentNs,
        'timeout',
        '-s',
        'KILL',
        '300',
        process.execPath,
        CLI,
        '-c',
        path.join(dir, 'leash.yaml'),
      ],
      { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    l.defer('stop leash service', () => stopChild(svc!, 10_000));
    svc.stderr!.setEncoding('utf8').on('data', (d: string) => (svcErr += d));
    // The shared helper waits 15 s; a loaded machine (six engineers on two cores) has taken longer to start.
    for (let i = 0; i < 1200 && !svcErr.includes('"msg":"ready"') && svc.exitCode === null; i++)
      await new Promise((r) => setTimeout(r, 50));
    await waitForServiceReady(svc, () => svcErr);
  }, 180_000);

  afterAll(async () => {
    try {
      if (svc && svc.exitCode === null) {
        const code = await stopChild(svc, 10_000);
        expect(code, svcErr.slice(-3000)).toBe(0);
      }
    } catch (e) {
      await lab.get().teardown();
      throw e;
    }
  }, 60_000);

  it('in shadow, the blocked actions succeed and are logged as would_block; leash learn proposes them; enforced, the proposal allows exactly them', async () => {
    const st = cli(['status', '--subject', u.name, '--json']);
    expect(JSON.parse(st.out), st.err).toMatchObject({ enforce: 'shadow' });

    // 1. Shadow: what strict would block goes through.
    const start = decisions().length;
    expect(await tlsAs('good.lab')).toBe('ok');
    expect(await dnsAs('good.lab')).toBe('ok');
    expect(readAs(`${mnt}/a1/f`)).toBe('ok');
    expect(readAs(`${mnt}/a2/f`)).toBe('ok');
    expect(execAs(`${mnt}/bin/t1`)).toBe('ok');
    await new Promise((r) => setTimeout(r, 500));
    const shadowLines = linesOf(start);
    expect(has(shadowLines, 'network', 'would_block', 'good.lab'), JSON.stringify(shadowLines)).toBe(true);
    expect(
      shadowLines.some((d) => d.action === 'would_block' && (d.subject as { dns?: string }).dns === 'good.lab'),
    ).toBe(true);
    expect(has(shadowLines, 'filesystem', 'would_block', `${mnt}/a2/f`)).toBe(true);
    expect(has(shadowLines, 'commands', 'would_block', `${mnt}/bin/t1`)).toBe(true);
    expect(has(shadowLines, 'filesystem', 'allow', `${mnt}/a1/f`)).toBe(true);
    // The would_block line keeps the reason the block would have had; nothing was blocked.
    expect(shadowLines.find((d) => d.action === 'would_block' && d.surface === 'commands')?.reason).toBe('not_allowed');
    expect(shadowLines.filter((d) => d.action === 'block')).toEqual([]);

    // 2. leash learn: never over an existing file; the proposal names what was seen.
    const out = path.join(dir, 'learned.yaml');
    fs.writeFileSync(out, 'keep\n');
    const clash = cli(['learn', '--subject', u.name, '--since', '10m', '--out', out, '--file', decisionsPath()]);
    expect(clash.code, clash.err).toBe(2);
    expect(clash.err).toMatch(/\[learn_out_exists\]/);
    expect(fs.readFileSync(out, 'utf8')).toBe('keep\n');
    fs.rmSync(out);
    const learned = cli(['learn', '--subject', u.name, '--since', '10m', '--out', out, '--file', decisionsPath()]);
    expect(learned.code, learned.err).toBe(0);
    const text = fs.readFileSync(out, 'utf8');
    expect(text).toMatch(/^# Proposed by leash learn/m);
    expect(text).toContain('good.lab:443');
    expect(text).toContain(`${mnt}/a2/f`);
    expect(text).toContain(`${mnt}/bin/t1`);
    expect(text).not.toContain(`${mnt}/a3`);

    // 3. Bound for real: consent for each finding, as the refusal names them.
    leash(['profile', 'save', 'learned', '--from', out]);
    const r1 = cli(['bind', `agent:${u.name}`, 'learned', '--enforce', 'enforce', '--no-reconcile', '--json']);
    const missing =
      r1.code === 0 ? [] : (JSON.parse(r1.out) as { error: { details: { missing: string[] } } }).error.details.missing;
    leash(['bind', `agent:${u.name}`, 'learned', '--enforce', 'enforce', ...missing.flatMap((t) => ['--ack', t])]);
    await hupAndWait();
    const st2 = cli(['status', '--subject', u.name, '--json']);
    expect(JSON.parse(st2.out)).toMatchObject({ enforce: 'enforce' });

    const mid = decisions().length;
    expect(await tlsAs('good.lab')).toBe('ok');
    expect(await dnsAs('good.lab')).toBe('ok');
    expect(readAs(`${mnt}/a1/f`)).toBe('ok');
    expect(readAs(`${mnt}/a2/f`)).toBe('ok');
    expect(execAs(`${mnt}/bin/t1`)).toBe('ok');
    // ... and nothing new.
    expect(await tlsAs('evil.lab')).toBe('ECONNRESET');
    expect(await dnsAs('evil.lab')).toBe('REFUSED');
    expect(readAs(`${mnt}/a3/f`)).toBe('EPERM');
    expect(execAs(`${mnt}/bin/t2`)).toBe('EPERM');
    await new Promise((r) => setTimeout(r, 500));
    const enforced = linesOf(mid);
    expect(enforced.filter((d) => d.action === 'would_block')).toEqual([]);
    expect(has(enforced, 'network', 'block', 'evil.lab')).toBe(true);
    expect(has(enforced, 'filesystem', 'block', `${mnt}/a3/f`)).toBe(true);
    expect(has(enforced, 'commands', 'block', `${mnt}/bin/t2`)).toBe(true);
    expect(has(enforced, 'network', 'allow', 'good.lab')).toBe(true);
  }, 120_000);
});
