// Three busy agents under the watcher with the default logging.allows (summary), on a tmpfs this
// test mounts: every block is in the log, plain allow lines are not (bounded: one summary line per
// subject and period), the summaries count every allowed open exactly, and `leash logs --action
// block --subject NAME` finds one agent's blocks in one command.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFsSupervisor, type FsSupervisor } from '../../src/dataplane/watcher/supervisor.js';
import { nativeAvailable } from '../../src/native.js';
import type { DecisionLine } from '../../src/log/decisions.js';
import { mountTmpfs, runCleanups, type Cleanup } from './helpers/fslab.js';

const WATCHER = path.resolve('dist/src/dataplane/watcher/watcher-main.js');
const CLI = path.resolve('dist/src/cli/main.js');
const root = process.getuid?.() === 0 && nativeAvailable();
const LOAD_MS = 12_000;
const SUMMARY_MS = 2_000;

interface Agent {
  name: string;
  uid: number;
  gid: number;
}

function createAgent(cleanups: Cleanup[], i: number): Agent {
  const name = `leash-t42b${process.pid % 1000}${i}`;
  try {
    execFileSync('userdel', [name], { stdio: 'ignore' });
  } catch {
    /* not left over */
  }
  execFileSync('useradd', ['--system', '--no-create-home', '--shell', '/usr/sbin/nologin', '--user-group', name]);
  cleanups.push(() => execFileSync('userdel', [name]));
  const id = (f: string) => Number(execFileSync('id', [f, name], { encoding: 'utf8' }).trim());
  return { name, uid: id('-u'), gid: id('-g') };
}

// Opens allowed files as fast as it can and a denied one every 400th turn, counting both from its side.
const BUSY = `
import os, sys, time
pub, secret, ms = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = [os.path.join(pub, f) for f in sorted(os.listdir(pub))]
# The listdir above opened the directory: an allowed open too.
ok, eperm, other, i = 1, 0, 0, 0
end = time.monotonic() + ms / 1000
while time.monotonic() < end:
    i += 1
    try:
        with open(secret if i % 400 == 0 else files[i % len(files)], 'rb'):
            ok += 1
    except PermissionError:
        eperm += 1
    except OSError:
        other += 1
print(ok, eperm, other)
`;

describe.skipIf(!root)('decision log under three busy agents (logging.allows summary)', () => {
  const cleanups: Cleanup[] = [];
  let dir = '';
  let decisions = '';
  let sup: FsSupervisor;
  const agents: Agent[] = [];
  const counted = new Map<number, { ok: number; eperm: number }>();
  let lines: DecisionLine[] = [];

  beforeAll(async () => {
    expect(fs.existsSync(WATCHER), 'run `npm run build` first').toBe(true);
    dir = mountTmpfs(cleanups);
    fs.mkdirSync(path.join(dir, 'pub'));
    fs.mkdirSync(path.join(dir, 'secret'));
    fs.mkdirSync(path.join(dir, 'log'), { mode: 0o700 });
    for (let i = 0; i < 8; i++) fs.writeFileSync(path.join(dir, 'pub', `f${i}`), 'x');
    fs.writeFileSync(path.join(dir, 'secret', 's'), 'secret');
    decisions = path.join(dir, 'log', 'decisions.jsonl');
    for (let i = 0; i < 3; i++) agents.push(createAgent(cleanups, i));
    const policy = {
      fail_mode: 'closed' as const,
      filesystem: { mode: 'blacklist' as const, allow: [], deny: [path.join(dir, 'secret')] },
      commands: { mode: 'blacklist' as const, allow: [], deny: [] },
    };
    sup = createFsSupervisor({
      subjects: agents.map((a) => ({ uid: a.uid, policy, failMode: 'closed' as const })),
      watch: [dir],
      decisions,
      wrap: ['timeout', '-s', 'KILL', '120'],
      script: WATCHER,
      args: ['--allows', 'summary', '--allow-summary-ms', String(SUMMARY_MS)],
      stderr: () => {},
    });
    cleanups.push(() => void sup.close());
    expect((await sup.ready).marks).toEqual([dir]);
    const runs = agents.map(
      (a) =>
        new Promise<void>((resolve, reject) => {
          const c = spawn(
            'setpriv',
            [`--reuid=${a.uid}`, `--regid=${a.gid}`, '--clear-groups', '/usr/bin/python3', '-c', BUSY].concat([
              path.join(dir, 'pub'),
              path.join(dir, 'secret', 's'),
              String(LOAD_MS),
            ]),
            { cwd: '/', stdio: ['ignore', 'pipe', 'pipe'], timeout: LOAD_MS + 30_000, killSignal: 'SIGKILL' },
          );
          let out = '';
          let err = '';
          c.stdout.on('data', (b: Buffer) => (out += b.toString()));
          c.stderr.on('data', (b: Buffer) => (err += b.toString()));
          c.on('close', (code) => {
            if (code !== 0) return reject(new Error(`agent ${a.name} exited ${code}: ${err}`));
            const [ok, eperm, other] = out.trim().split(' ').map(Number);
            expect(other).toBe(0);
            counted.set(a.uid, { ok: ok!, eperm: eperm! });
            resolve();
          });
        }),
    );
    await Promise.all(runs);
    await sup.close(); // the watcher writes its last summaries as it exits
    lines = fs
      .readFileSync(decisions, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as DecisionLine);
  }, 120_000);
  afterAll(async () => {
    await sup?.close();
    runCleanups(cleanups);
  });

  it('holds every block, no plain allow line, and summaries that count every allowed open exactly', () => {
    for (const a of agents) {
      const mine = lines.filter((l) => l.uid === a.uid);
      const c = counted.get(a.uid)!;
      process.stderr.write(`logs-busy: ${a.name} opened ${c.ok} files, refused ${c.eperm}\n`);
      expect(c.ok).toBeGreaterThan(1000);
      expect(c.eperm).toBeGreaterThan(0);
      expect(mine.filter((l) => l.action === 'block')).toHaveLength(c.eperm);
      expect(mine.filter((l) => l.action === 'allow' && l.reason !== 'allow_summary')).toHaveLength(0);
      const sums = mine.filter((l) => l.reason === 'allow_summary');
      const allowed = sums.reduce((n, l) => n + (l.subject as { allowed: number }).allowed, 0);
      expect(allowed).toBe(c.ok);
      // Bounded by time, not by load: about one line per period (and one at exit).
      expect(sums.length).toBeLessThanOrEqual(LOAD_MS / SUMMARY_MS + 3);
    }
    const blocks = lines.filter((l) => l.action === 'block').length;
    process.stderr.write(`logs-busy: ${lines.length} lines in the log, ${blocks} of them blocks\n`);
    expect(lines.length).toBeLessThan(blocks + 3 * (LOAD_MS / SUMMARY_MS + 3));
  });

  it("leash logs --action block --subject NAME finds one agent's blocks in one command", () => {
    const a = agents[1]!;
    const out = execFileSync(
      process.execPath,
      [CLI, 'logs', '--file', decisions, '--action', 'block', '--subject', a.name, '--json', '--since', '1h'],
      { encoding: 'utf8' },
    );
    const got = out
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as DecisionLine);
    expect(got).toHaveLength(counted.get(a.uid)!.eperm);
    expect(got.every((l) => l.uid === a.uid && l.action === 'block' && l.reason === 'deny_entry')).toBe(true);
  });
});
