import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { nativeAvailable } from '../../src/native.js';
import { CLI, configFile, ensureBuilt, tmpDir } from './helpers.js';

beforeAll(() => ensureBuilt(), 120_000);

/** A fake systemd notify socket: a python datagram receiver (Node's dgram has no AF_UNIX). */
async function fakeNotify(): Promise<{ path: string; messages: string[]; waitFor: (s: string) => Promise<void> }> {
  const sockPath = path.join(tmpDir('leash-notify-'), 'notify.sock');
  const py = `import socket,sys
s=socket.socket(socket.AF_UNIX,socket.SOCK_DGRAM)
s.bind(${JSON.stringify(sockPath)})
print('bound',flush=True)
while True:
  sys.stdout.write(s.recv(4096).decode()+'\\0');sys.stdout.flush()
`;
  const child = spawn('python3', ['-c', py], { stdio: ['ignore', 'pipe', 'inherit'] });
  onTestFinished(() => void child.kill('SIGKILL'));
  let out = '';
  const messages: string[] = [];
  await new Promise<void>((resolve) => {
    child.stdout.on('data', (b: Buffer) => {
      out += b.toString();
      if (out.startsWith('bound\n')) {
        const parts = out.slice('bound\n'.length).split('\0');
        parts.pop();
        messages.splice(0, messages.length, ...parts);
        resolve();
      }
    });
  });
  const waitFor = async (s: string) => {
    for (let i = 0; i < 200 && !messages.some((m) => m.includes(s)); i++) await new Promise((r) => setTimeout(r, 50));
    expect(
      messages.some((m) => m.includes(s)),
      `notify ${s} in ${JSON.stringify(messages)}`,
    ).toBe(true);
  };
  return { path: sockPath, messages, waitFor };
}

function ownDirs(): Record<string, string> {
  const d = tmpDir();
  return {
    LEASH_PID_FILE: path.join(d, 'leash.pid'),
    LEASH_STATE_DIR: path.join(d, 'state'),
    LEASH_TOOLS_SOCKET: path.join(d, 'run', 'tools.sock'),
  };
}

function start(
  args: string[],
  env: Record<string, string> = {},
): { child: ChildProcess; out: () => string; err: () => string; exit: Promise<number | null> } {
  const child = spawn(process.execPath, [CLI, ...args], {
    // The pid file, the state and the sockets go to a temp dir, never the host's /run/leash or /var/lib/leash.
    env: { ...process.env, ...ownDirs(), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  onTestFinished(() => void child.kill('SIGKILL'));
  let out = '';
  let err = '';
  child.stdout!.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr!.on('data', (b: Buffer) => (err += b.toString()));
  const exit = new Promise<number | null>((r) => child.on('close', (code) => r(code)));
  return { child, out: () => out, err: () => err, exit };
}

// Enforcers off: these tests are about readiness and signals, and must not change the host's firewall
// or mark its filesystems (tests/integration/service-agents.test.ts runs them for real in a namespace).
const policy = (decisions: string) => `user: nobody
network: { allow: [github.com] }
logging: { level: info, decisions: ${decisions} }
enforcers: { network: false, filesystem: false, tools: false }
`;

describe.skipIf(!nativeAvailable())('leash service (no subcommand)', () => {
  it.each(['SIGTERM', 'SIGINT'] as const)(
    'reports READY=1 with a STATUS through sd_notify, exits 0 on %s',
    async (sig) => {
      const notify = await fakeNotify();
      const decisions = path.join(tmpDir(), 'log', 'decisions.jsonl');
      const svc = start(['-c', configFile(policy(decisions))], { NOTIFY_SOCKET: notify.path });
      await notify.waitFor('READY=1');
      const ready = notify.messages.find((m) => m.includes('READY=1'))!;
      expect(ready).toMatch(/^READY=1\nSTATUS=leashing nobody \(uid 65534\)/);
      // The decision sink is opened at startup: 0600 in a 0750 directory.
      expect(fs.statSync(decisions).mode & 0o777).toBe(0o600);
      svc.child.kill(sig);
      expect(await svc.exit).toBe(0);
      expect(notify.messages).toContain('STOPPING=1');
      expect(svc.err()).not.toMatch(/\n\s+at /);
    },
  );

  it('SIGHUP re-reads the config and stays up; a bad config on reload keeps the old one', async () => {
    const notify = await fakeNotify();
    const file = configFile(policy('stdout'));
    const svc = start(['-c', file], { NOTIFY_SOCKET: notify.path });
    await notify.waitFor('READY=1');
    fs.writeFileSync(file, 'network: { mode: greylist }\n');
    svc.child.kill('SIGHUP');
    for (let i = 0; i < 100 && !svc.err().includes('"code":"config_invalid"'); i++)
      await new Promise((r) => setTimeout(r, 50));
    expect(svc.err()).toContain('"code":"config_invalid"');
    expect(svc.child.exitCode).toBeNull();
    fs.writeFileSync(file, policy('stdout').replace('user: nobody', 'user: nobody\nfail_mode: open'));
    svc.child.kill('SIGHUP');
    await notify.waitFor('RELOADING=1');
    svc.child.kill('SIGTERM');
    expect(await svc.exit).toBe(0);
  });

  it('a refused config is exit 2 with path: message lines on stderr and no stack trace', async () => {
    const notify = await fakeNotify();
    const svc = start(['-c', configFile('network:\n  mode: greylist\n  alow: [x]\n')], { NOTIFY_SOCKET: notify.path });
    expect(await svc.exit).toBe(2);
    expect(svc.err()).toMatch(/\[config_invalid\]/);
    expect(svc.err()).toMatch(/^ {2}network\.mode: \S/m);
    expect(svc.err()).toMatch(/^ {2}network\.alow: .*"allow"/m);
    expect(svc.err()).not.toMatch(/\n\s+at /);
    expect(notify.messages.some((m) => m.includes('READY=1'))).toBe(false);
  });

  it('a missing config is exit 2 (config_missing); an unknown user is exit 2 (user_unknown)', async () => {
    const missing = start(['-c', path.join(tmpDir(), 'absent.yaml')]);
    expect(await missing.exit).toBe(2);
    expect(missing.err()).toMatch(/\[config_missing\]/);
    const ghost = start(['-c', configFile('user: leash-tno-such-account\nlogging: { decisions: stdout }\n')]);
    expect(await ghost.exit).toBe(2);
    expect(ghost.err()).toMatch(/\[user_unknown\]/);
  });

  it('runs without NOTIFY_SOCKET too (sd_notify is a no-op)', async () => {
    const env: NodeJS.ProcessEnv = { ...process.env, ...ownDirs() };
    delete env.NOTIFY_SOCKET;
    const svc = start(['-c', configFile(policy('stdout'))], env as Record<string, string>);
    for (let i = 0; i < 100 && !svc.err().includes('"ready"'); i++) await new Promise((r) => setTimeout(r, 50));
    expect(svc.err()).toContain('"msg":"ready"');
    svc.child.kill('SIGTERM');
    expect(await svc.exit).toBe(0);
  });

  it('a second service on the same state or runtime directory is refused (exit 2, service_running, the first pid); the first runs on', async () => {
    const dirs = ownDirs();
    const file = configFile(policy('stdout'));
    const first = start(['-c', file], dirs);
    for (let i = 0; i < 200 && !first.err().includes('"msg":"ready"'); i++) await new Promise((r) => setTimeout(r, 50));
    expect(first.err()).toContain('"msg":"ready"');
    const sameState = start(['-c', file], { ...ownDirs(), LEASH_STATE_DIR: dirs.LEASH_STATE_DIR! });
    const sameRun = start(['-c', file], { ...ownDirs(), LEASH_TOOLS_SOCKET: dirs.LEASH_TOOLS_SOCKET! });
    for (const second of [sameState, sameRun]) {
      expect(await second.exit).toBe(2);
      expect(second.err()).toContain('[service_running]');
      expect(second.err()).toContain(`pid ${first.child.pid}`);
      expect(second.err()).not.toMatch(/\n\s+at /);
    }
    expect(first.child.exitCode).toBeNull();
    // A crash leaves its lock behind: it is stale (no such process), and a restart is not blocked.
    first.child.kill('SIGKILL');
    await first.exit;
    expect(fs.existsSync(path.join(dirs.LEASH_STATE_DIR!, 'leash-service.lock'))).toBe(true);
    const again = start(['-c', file], dirs);
    for (let i = 0; i < 200 && !again.err().includes('"msg":"ready"'); i++) await new Promise((r) => setTimeout(r, 50));
    expect(again.err()).toContain('"msg":"ready"');
    again.child.kill('SIGTERM');
    expect(await again.exit).toBe(0);
    expect(fs.existsSync(path.join(dirs.LEASH_STATE_DIR!, 'leash-service.lock'))).toBe(false);
  });
});
