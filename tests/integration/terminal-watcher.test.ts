// Defence in depth: `leash terminal` run as a leashed account while the fanotify watcher
// enforces that account's commands surface in the kernel. A command the terminal's own
// policy allows but the kernel policy denies must fail (EXEC_ERROR), not run. Everything
// lives on a tmpfs this test mounts; the account is leash-tt<N>; all removed in teardown.
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { createFsSupervisor, type FsSupervisor } from '../../src/dataplane/watcher/supervisor.js';
import { createToolsSocketServer, type ToolsSocketServer } from '../../src/tools/remote/socket.js';
import { nativeAvailable } from '../../src/native.js';
import { copyBinaries, mountTmpfs, runCleanups, type Cleanup } from './helpers/fslab.js';

const WATCHER = path.resolve('dist/src/dataplane/watcher/watcher-main.js');
const LEASH = path.resolve('dist/src/cli/main.js');
const root = process.getuid?.() === 0 && nativeAvailable();

interface Envelope {
  ok: boolean;
  code: string;
  stdout: string;
  stderr: string;
  exit_code: number | null;
  policy_reason: string | null;
}

let seq = 0;
function createTerminalUser(cleanups: Cleanup[]): { name: string; uid: number; gid: number } {
  const name = `leash-tt${process.pid % 10000}${seq++}`;
  spawnSync('userdel', [name]); // a leftover of a crashed run
  execFileSync('useradd', ['--system', '--no-create-home', '--shell', '/usr/sbin/nologin', '--user-group', name]);
  cleanups.push(() => void execFileSync('userdel', [name]));
  const uid = Number(execFileSync('id', ['-u', name], { encoding: 'utf8' }).trim());
  const gid = Number(execFileSync('id', ['-g', name], { encoding: 'utf8' }).trim());
  return { name, uid, gid };
}

function readJsonl(file: string): Array<Record<string, unknown>> {
  if (!fs.existsSync(file)) return [];
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe.skipIf(!root)('leash terminal under the fanotify watcher (defence in depth)', () => {
  const cleanups: Cleanup[] = [];
  let dir = '';
  let user: { name: string; uid: number; gid: number };
  let sup: FsSupervisor;
  let socketServer: ToolsSocketServer;
  let kernelDecisions = '';
  const p = (...s: string[]): string => path.join(dir, ...s);
  // The terminal allows echo, cat and id; the kernel's commands surface allows only echo and id.
  const terminalCommands = { mode: 'whitelist', allow: ['echo', 'cat', 'id'], deny: [], args: {} };

  beforeAll(async () => {
    expect(fs.existsSync(WATCHER) && fs.existsSync(LEASH), 'run `npm run build` first').toBe(true);
    dir = mountTmpfs(cleanups);
    const bin = copyBinaries(p('bin'), ['echo', 'cat', 'id']);
    user = createTerminalUser(cleanups);
    for (const [d, mode] of [
      ['jail', 0o755],
      ['log', 0o700],
      ['etc', 0o755],
      ['run', 0o755],
    ] as const) {
      fs.mkdirSync(p(d), { mode });
      if (d === 'jail' || d === 'log') fs.chownSync(p(d), user.uid, user.gid);
    }
    fs.writeFileSync(p('jail', 'notes.txt'), 'hello from the jail\n');
    fs.writeFileSync(p('etc', 'terminal.yaml'), stringify({ commands: terminalCommands }), { mode: 0o644 });
    fs.mkdirSync(p('kernel-log'), { mode: 0o700 });
    kernelDecisions = p('kernel-log', 'decisions.jsonl');
    sup = createFsSupervisor({
      subjects: [
        {
          uid: user.uid,
          failMode: 'closed',
          policy: {
            fail_mode: 'closed',
            filesystem: { mode: 'blacklist', allow: [], deny: [] },
            commands: { mode: 'whitelist', allow: [bin.echo!, bin.id!], deny: [] },
          },
        },
      ],
      decisions: kernelDecisions,
      wrap: ['timeout', '-s', 'KILL', '300'],
      script: WATCHER,
      stderr: () => {},
    });
    cleanups.push(() => void sup.close());
    const st = await sup.ready;
    // One mark: the test's own tmpfs, nothing else on the host.
    expect(st.marks).toHaveLength(1);
    expect(st.marks[0]!.startsWith(dir)).toBe(true);
    // The service side of the terminal's policy lookup: answers by the caller's SO_PEERCRED UID.
    socketServer = await createToolsSocketServer({
      path: p('run', 'tools.sock'),
      policyForUid: () => null,
      log: { write: () => 'unused' },
      commandsPolicyForUid: (uid) => (uid === user.uid ? { fail_mode: 'closed', commands: terminalCommands } : null),
    });
    cleanups.push(() => void socketServer.close());
  });

  afterAll(async () => {
    await socketServer?.close();
    await sup?.close();
    runCleanups(cleanups);
  });

  /** Starts `leash terminal` as the leashed account (setpriv) and connects an MCP client over stdio. */
  async function terminalAsUser(policyArgs: string[]) {
    const transport = new StdioClientTransport({
      command: 'setpriv',
      args: [
        `--reuid=${user.uid}`,
        `--regid=${user.gid}`,
        '--clear-groups',
        process.execPath,
        LEASH,
        'terminal',
        '--jail',
        p('jail'),
        '--audit',
        p('log', 'audit.jsonl'),
        '--decision-log',
        p('log', 'decisions.jsonl'),
        '--path',
        p('bin'),
        '--timeout',
        '10000',
        ...policyArgs,
      ],
      env: { PATH: '/usr/bin:/bin', HOME: p('jail') },
      stderr: 'pipe',
      cwd: p('jail'),
    });
    const client = new Client({ name: 'leash-it', version: '1.0.0' });
    await client.connect(transport);
    cleanups.push(() => void client.close());
    const call = async (name: string, command: string): Promise<Envelope> =>
      (await client.callTool({ name, arguments: { command } })).structuredContent as unknown as Envelope;
    return { client, call };
  }

  it('runs what both the terminal and the kernel allow, as the leashed account', async () => {
    const t = await terminalAsUser(['--policy', p('etc', 'terminal.yaml')]);
    expect(await t.call('run_command', 'echo both allow')).toMatchObject({ code: 'OK', stdout: 'both allow\n' });
    expect(await t.call('run_command', 'id -u')).toMatchObject({ code: 'OK', stdout: `${user.uid}\n` });
    await t.client.close();
  });

  it('a command the terminal allows but the kernel denies fails with EXEC_ERROR and does not run', async () => {
    const t = await terminalAsUser(['--policy', p('etc', 'terminal.yaml')]);
    // The terminal alone says yes ...
    const explained = await t.call('explain_command', 'cat notes.txt');
    expect(explained).toMatchObject({ ok: true, code: 'OK' });
    expect(explained.policy_reason).toMatch(/allow entry 'cat'/);
    // ... the kernel's commands surface says no: exec gets EPERM, nothing is printed.
    const r = await t.call('run_command', 'cat notes.txt');
    expect(r).toMatchObject({ ok: false, code: 'EXEC_ERROR', stdout: '', exit_code: null });
    expect(r.policy_reason).toMatch(/EPERM/);
    // Both logs say what happened: the terminal allowed, the watcher blocked, same UID.
    const terminalSide = readJsonl(p('log', 'decisions.jsonl')).filter(
      (d) => (d.subject as { binary?: string }).binary === p('bin', 'cat'),
    );
    expect(terminalSide.at(-1)).toMatchObject({ uid: user.uid, surface: 'commands', action: 'allow' });
    const kernelSide = readJsonl(kernelDecisions).filter((d) => JSON.stringify(d.subject).includes(p('bin', 'cat')));
    expect(kernelSide.at(-1)).toMatchObject({
      uid: user.uid,
      surface: 'commands',
      action: 'block',
      reason: 'not_allowed',
    });
    const audit = readJsonl(p('log', 'audit.jsonl'));
    expect(audit.at(-1)).toMatchObject({ event: 'outcome', code: 'EXEC_ERROR' });
    await t.client.close();
  });

  it('without --policy, gets the policy the service holds for its SO_PEERCRED UID', async () => {
    const t = await terminalAsUser(['--socket', p('run', 'tools.sock')]);
    expect(await t.call('run_command', 'echo via the service')).toMatchObject({ code: 'OK' });
    expect((await t.call('run_command', 'cat notes.txt')).code).toBe('EXEC_ERROR');
    expect((await t.call('explain_command', 'ls')).code).toBe('POLICY_DENIED');
    await t.client.close();
  });
});
