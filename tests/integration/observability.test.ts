/**
 * The journal and the metrics (issue #19). The journal as a view: the service, its watcher and the proxy send operational lines and decisions to
 * a real systemd-journald (the test's own, helpers/journald.ts) with fields of their own, and `journalctl` finds
 * them by each field. Blocks always go; allows are left out under the default `journal_allows: 0`. Without a
 * journal, the service's stderr is the plain JSON lines it always was. The metrics endpoint (OpenMetrics on a 0600
 * unix socket) is scraped before and after the test makes decisions: every family is there and moves.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { LAB, canRunLab, stopChild, useLab, type LabUser, waitForServiceReady } from '../lab/index.js';
import { loadNative } from '../../src/native.js';
import { serializeEntry } from '../../src/log/journal.js';
import { parseMetricsText, type Sample } from '../../src/metrics/metrics.js';
import { fetchMetrics } from '../../src/metrics/server.js';
import { INITIAL_PID_NS } from '../../src/dataplane/watcher/pidns.js';
import net from 'node:net';
import { JOURNALD, hasJournalctl, startJournald, type TestJournald } from './helpers/journald.js';

const CLI = path.resolve(__dirname, '../../dist/src/cli/main.js');

const OPENER = `import fs from 'node:fs';
const codes = {};
for (const f of process.argv.slice(2)) {
  try { fs.closeSync(fs.openSync(f, 'r')); codes.ok = (codes.ok ?? 0) + 1; }
  catch (e) { codes[e.code] = (codes[e.code] ?? 0) + 1; }
}
process.stdout.write(JSON.stringify(codes) + '\\n');
`;

interface Line {
  ref: string;
  uid: number;
  surface: string;
  action: string;
  reason: string;
  subject: unknown;
}

describe.skipIf(!canRunLab)('the journal: decisions and operational lines with fields of their own (root, lab)', () => {
  const lab = useLab('jrn');
  let dir = '';
  let mnt = '';
  let user!: LabUser;
  let jd: TestJournald | null = null;
  const services: ChildProcess[] = [];
  let running: { c: ChildProcess; err: () => string } | null = null;
  const log = () => path.join(dir, 'decisions.jsonl');

  const startService = async (journal: boolean): Promise<{ c: ChildProcess; err: () => string }> => {
    const l = lab.get();
    const pidFile = path.join(dir, journal ? 'j.pid' : 'n.pid');
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      LEASH_STATE_DIR: path.join(dir, journal ? 'state-j' : 'state-n'),
      LEASH_PASSWD: path.join(dir, 'passwd'),
      LEASH_TOOLS_SOCKET: path.join(dir, journal ? 'tools-j.sock' : 'tools-n.sock'),
      LEASH_PID_FILE: pidFile,
      LEASH_WATCHER_TIMEOUT_S: '120',
      LEASH_METRICS_SOCKET: path.join(dir, journal ? 'metrics-j.sock' : 'metrics-n.sock'),
    };
    delete env.JOURNAL_STREAM;
    delete env.LEASH_JOURNAL_SOCKET;
    if (journal) env.LEASH_JOURNAL_SOCKET = jd!.socket;
    const c = spawn(
      'ip',
      [
        'netns',
        'exec',
        l.agentNs,
        'timeout',
        '-s',
        'KILL',
        '120',
        process.execPath,
        CLI,
        '-c',
        path.join(dir, 'leash.yaml'),
      ],
      { env, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    services.push(c);
    l.defer('stop leash service', () => stopChild(c, 10_000));
    let err = '';
    c.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
    if (journal) {
      // Its operational lines go to the journal, not stderr: ready is read there.
      const ready = () => {
        const pid = fs.existsSync(pidFile) ? fs.readFileSync(pidFile, 'utf8').trim() : '';
        return pid !== '' && jd!.query([`_PID=${pid}`, 'MESSAGE=ready']).length > 0;
      };
      for (let i = 0; i < 300 && c.exitCode === null && !ready(); i++) await new Promise((r) => setTimeout(r, 50));
      if (!ready()) throw new Error(`service not ready (journal):\n${err}`);
    } else {
      await waitForServiceReady(
        c,
        () => err,
        () => fs.existsSync(pidFile),
      );
    }
    return { c, err: () => err };
  };

  const openAs = (files: string[]): Record<string, number> => {
    const r = spawnSync(
      'ip',
      [
        'netns',
        'exec',
        lab.get().agentNs,
        'setpriv',
        `--reuid=${user.uid}`,
        `--regid=${user.gid}`,
        '--clear-groups',
        'timeout',
        '-s',
        'KILL',
        '30',
        process.execPath,
        path.join(dir, 'opener.mjs'),
        ...files,
      ],
      { encoding: 'utf8' },
    );
    return JSON.parse(r.stdout) as Record<string, number>;
  };
  const read = (): Line[] =>
    fs
      .readFileSync(log(), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Line);
  const waitFor = async <T>(f: () => T[], n: number): Promise<T[]> => {
    let got: T[] = [];
    for (let i = 0; i < 100; i++) {
      got = f();
      if (got.length >= n) return got;
      await new Promise((r) => setTimeout(r, 50));
    }
    return got;
  };

  beforeAll(async () => {
    // Root runs the suite: a missing binary is a failure that names it (scripts/install-deps.sh installs systemd).
    expect(JOURNALD, 'systemd-journald is not installed (scripts/install-deps.sh installs systemd)').toBeDefined();
    expect(hasJournalctl, 'journalctl is not installed (scripts/install-deps.sh installs systemd)').toBe(true);
    const l = lab.get();
    jd = await startJournald();
    l.defer('stop journald', () => jd!.stop());
    dir = fs.mkdtempSync(path.join(l.dir, 'jrn-'));
    fs.chmodSync(dir, 0o755);
    mnt = path.join(dir, 'fs');
    fs.mkdirSync(mnt);
    const m = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=4m,mode=0755', 'leash-test', mnt], { encoding: 'utf8' });
    if (m.status !== 0) throw new Error(m.stderr);
    l.defer(`umount ${mnt}`, () => spawnSync('umount', ['-l', mnt]));
    for (const d of ['ok', 'no']) fs.mkdirSync(path.join(mnt, d), { mode: 0o755 });
    for (let i = 0; i < 3; i++) {
      fs.writeFileSync(path.join(mnt, 'no', `f${i}`), 'x', { mode: 0o644 });
      fs.writeFileSync(path.join(mnt, 'ok', `f${i}`), 'x', { mode: 0o644 });
    }
    fs.writeFileSync(path.join(dir, 'opener.mjs'), OPENER, { mode: 0o644 });
    user = await l.createUser('leash-tjr1');
    fs.writeFileSync(
      path.join(dir, 'passwd'),
      `root:x:0:0:root:/root:/bin/bash\n${user.name}:x:${user.uid}:${user.gid}::/nonexistent:/usr/sbin/nologin\n`,
    );
    fs.writeFileSync(
      path.join(dir, 'leash.yaml'),
      `user: null
fail_mode: closed
network: { mode: whitelist, allow: [good.lab], deny: [], dns_resolvers: [${LAB.dnsV4}] }
filesystem: { mode: whitelist, allow: [${mnt}/ok], deny: [] }
commands: { mode: blacklist, allow: [], deny: [] }
tools: { mode: whitelist, allow: [], deny: [] }
logging: { level: info, decisions: ${log()}, allows: all, journal: auto, journal_allows: 0 }
`,
    );
  }, 120_000);

  it('blocks reach the journal with LEASH_* fields, found by each; allows stay out; the file has every line', async () => {
    const { c, err } = await startService(true);
    const pid = fs.readFileSync(path.join(dir, 'j.pid'), 'utf8').trim();
    expect(c.exitCode, err()).toBeNull();
    // The service's own operational lines: in the journal, with its component and a priority from the level.
    const ready = jd!.query([`_PID=${pid}`, 'MESSAGE=ready']);
    expect(ready, err()).toHaveLength(1);
    expect(ready[0]).toMatchObject({ PRIORITY: '6', LEASH_COMPONENT: 'service', SYSLOG_IDENTIFIER: 'leash' });
    expect(err()).not.toContain('"msg":"ready"');

    const files = [0, 1, 2].map((i) => path.join(mnt, 'no', `f${i}`));
    expect(openAs(files)).toEqual({ EPERM: 3 });
    expect(openAs([0, 1, 2].map((i) => path.join(mnt, 'ok', `f${i}`)))).toEqual({ ok: 3 });
    const evil = LAB.hosts.find((h) => h.name === 'evil.lab')!.v4;
    const tls = await lab.get().probe(user, [{ kind: 'tls', host: evil, port: 443, servername: 'x.evil.lab' }]);
    expect(tls.map((r) => (r.ok ? 'ok' : r.code))).toEqual(['ECONNRESET']);

    const uid = `LEASH_UID=${user.uid}`;
    const fsBlocks = await waitFor(() => jd!.query([uid, 'LEASH_SURFACE=filesystem', 'LEASH_ACTION=block']), 3);
    expect(fsBlocks).toHaveLength(3);
    const netBlocks = await waitFor(() => jd!.query([uid, 'LEASH_SURFACE=network', 'LEASH_REASON=not_allowed']), 1);
    expect(netBlocks).toHaveLength(1);

    // Every journal entry is a line of the decision log, tied by its ref; the file also has the allows.
    const lines = read().filter((l) => l.uid === user.uid);
    const byRef = new Map(lines.map((l) => [l.ref, l]));
    for (const e of fsBlocks) {
      const line = byRef.get(e.LEASH_REF!);
      expect(line, e.LEASH_REF).toBeDefined();
      expect(e).toMatchObject({ LEASH_COMPONENT: 'watcher', PRIORITY: '4', SYSLOG_IDENTIFIER: 'leash-watcher' });
      expect(e.LEASH_REASON).toBe(line!.reason);
      expect(files.some((f) => e.MESSAGE!.includes(f))).toBe(true);
      // Found by its ref alone, exactly once.
      expect(jd!.query([`LEASH_REF=${e.LEASH_REF}`])).toHaveLength(1);
    }
    expect(netBlocks[0]).toMatchObject({ LEASH_COMPONENT: 'proxy', LEASH_ACTION: 'block', SYSLOG_IDENTIFIER: 'leash' });
    expect(byRef.get(netBlocks[0]!.LEASH_REF!)?.surface).toBe('network');
    expect(lines.filter((l) => l.surface === 'filesystem' && l.action === 'allow').length).toBeGreaterThanOrEqual(3);
    expect(jd!.query([uid, 'LEASH_ACTION=allow'])).toEqual([]);
    // journalctl's field matches combine: one component's blocks only.
    expect(jd!.query([uid, 'LEASH_ACTION=block', 'LEASH_COMPONENT=watcher'])).toHaveLength(3);
    running = { c, err };
  }, 120_000);

  it('the metrics endpoint: every family present, and each moves when the test makes decisions', async () => {
    expect(running, 'the service of the first test').not.toBeNull();
    const sock = path.join(dir, 'metrics-j.sock');
    expect(fs.statSync(sock).mode & 0o777).toBe(0o600);
    const scrape = async (): Promise<Sample[]> => {
      const t = await fetchMetrics(sock);
      expect(t, 'metrics answered').not.toBeNull();
      expect(t!.trimEnd().endsWith('# EOF')).toBe(true); // OpenMetrics
      return parseMetricsText(t!);
    };
    const val = (xs: Sample[], name: string, labels: Record<string, string> = {}) =>
      xs
        .filter((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v))
        .reduce((a, x) => a + x.value, 0);
    const has = (xs: Sample[], name: string) => xs.some((x) => x.name === name);
    const before = await scrape();
    for (const f of [
      'leash_decisions_total',
      'leash_stage_seconds_count',
      'leash_watcher_judge_seconds_count',
      'leash_watcher_queue_depth',
      'leash_watcher_allows_counted_total',
      'leash_subjects',
      'leash_host_setting',
      'leash_journal_entries_total',
      'leash_watcher_foreign_pid_events_total',
    ])
      expect(has(before, f), f).toBe(true);
    // Both processes in the host's initial PID namespace (docs/filesystem.md, "PID namespaces").
    expect(val(before, 'leash_pid_namespace', { process: 'service' })).toBe(INITIAL_PID_NS);
    expect(val(before, 'leash_pid_namespace', { process: 'watcher' })).toBe(INITIAL_PID_NS);
    expect(val(before, 'leash_subjects', { state: 'active' })).toBeGreaterThanOrEqual(1);
    expect(val(before, 'leash_host_setting', { setting: 'memfd_noexec' })).toBe(0);

    // Decisions on every stage: opens (watcher), a blocked TLS connection (proxy), a DNS query (forwarder), a judge
    // request on the tools socket (root has no gate policy: no_policy), a SIGHUP (a reconcile pass).
    expect(openAs([path.join(mnt, 'no', 'f0'), path.join(mnt, 'ok', 'f0')])).toEqual({ EPERM: 1, ok: 1 });
    const evil = LAB.hosts.find((h) => h.name === 'evil.lab')!.v4;
    await lab.get().probe(user, [
      { kind: 'tls', host: evil, port: 443, servername: 'y.evil.lab' },
      { kind: 'dnsudp', server: LAB.dnsV4, name: 'good.lab' },
    ]);
    await new Promise<void>((resolve, reject) => {
      const c = net.connect(path.join(dir, 'tools-j.sock'));
      c.on('error', reject);
      c.on('data', () => {
        c.destroy();
        resolve();
      });
      c.write(
        `${JSON.stringify({ op: 'judge', seq: 1, method: 'tools/call', params: { name: 'x', arguments: {} } })}\n`,
      );
    });
    process.kill(Number(fs.readFileSync(path.join(dir, 'j.pid'), 'utf8')), 'SIGHUP');
    await new Promise((r) => setTimeout(r, 1500));
    const after = await scrape();
    const moved = (name: string, labels: Record<string, string> = {}) =>
      expect(val(after, name, labels), `${name} ${JSON.stringify(labels)}`).toBeGreaterThan(val(before, name, labels));
    moved('leash_decisions_total', { surface: 'filesystem', action: 'block', reason: 'not_allowed' });
    moved('leash_decisions_total', { surface: 'filesystem', action: 'allow' });
    moved('leash_decisions_total', { surface: 'network', action: 'block' });
    moved('leash_decisions_total', { surface: 'tools', action: 'block', reason: 'no_policy' });
    for (const stage of ['proxy_setup', 'dns', 'tools_judge', 'reconcile'])
      moved('leash_stage_seconds_count', { stage });
    moved('leash_watcher_judge_seconds_count');
    moved('leash_journal_entries_total', { outcome: 'sent' });
    moved('leash_journal_entries_total', { outcome: 'allows_skipped' });

    // The socket is root's: the leashed account cannot read it.
    const r = spawnSync(
      'setpriv',
      [
        `--reuid=${user.uid}`,
        `--regid=${user.gid}`,
        '--clear-groups',
        process.execPath,
        '-e',
        `require('node:net').connect(${JSON.stringify(sock)}).on('error', (e) => { console.log(e.code); }).on('connect', () => console.log('connected'))`,
      ],
      { encoding: 'utf8', timeout: 10_000 },
    );
    expect(r.stdout.trim()).toBe('EACCES');

    // leash status reads the same figures.
    const st = spawnSync(process.execPath, [CLI, '-c', path.join(dir, 'leash.yaml'), 'status', '--json'], {
      encoding: 'utf8',
      env: {
        ...process.env,
        LEASH_METRICS_SOCKET: sock,
        LEASH_STATE_DIR: path.join(dir, 'state-j'),
        LEASH_PASSWD: path.join(dir, 'passwd'),
      },
    });
    expect(st.status, st.stderr).toBe(0);
    const live = (
      JSON.parse(st.stdout) as {
        live: { decisions: Record<string, { block: number }>; subjects: Record<string, number> };
      }
    ).live;
    expect(live.decisions.filesystem!.block).toBe(
      val(after, 'leash_decisions_total', { surface: 'filesystem', action: 'block' }),
    );
    expect(live.subjects.active).toBeGreaterThanOrEqual(1);

    expect(await stopChild(running!.c, 10_000), running!.err()).toBe(0);
    running = null;
  }, 120_000);

  it('without a journal, the service writes its plain JSON lines to stderr and sends nothing', async () => {
    const before = jd!.query(['SYSLOG_IDENTIFIER=leash']).length;
    const watcherBefore = jd!.query(['SYSLOG_IDENTIFIER=leash-watcher']).length;
    const { c, err } = await startService(false);
    expect(openAs([path.join(mnt, 'no', 'f0')])).toEqual({ EPERM: 1 });
    const ready = err()
      .split('\n')
      .filter((l) => l.includes('"msg":"ready"'))
      .map((l) => JSON.parse(l) as { level: number; component: string });
    expect(ready).toHaveLength(1);
    expect(ready[0]).toMatchObject({ level: 30, component: 'service' });
    expect(await stopChild(c, 10_000), err()).toBe(0);
    expect(jd!.query(['SYSLOG_IDENTIFIER=leash']).length).toBe(before);
    expect(jd!.query(['SYSLOG_IDENTIFIER=leash-watcher']).length).toBe(watcherBefore);
  }, 120_000);

  it('an entry too large for a datagram goes as a sealed memfd and arrives whole', async () => {
    const big = 'x'.repeat(1024 * 1024); // over the kernel's datagram limit (net.core.wmem_max)
    const entry = serializeEntry([
      ['MESSAGE', 'big entry'],
      ['LEASH_TEST_BIG', big],
      ['LEASH_TEST_ID', String(process.pid)],
    ]);
    expect(loadNative().journalSend(jd!.socket, entry)).toBe(0);
    // journald reads the memfd after the send returns: waited for, as the other entries are.
    const got = await waitFor(() => jd!.query([`LEASH_TEST_ID=${process.pid}`, '--all']), 1);
    expect(got).toHaveLength(1);
    expect(got[0]!.LEASH_TEST_BIG).toHaveLength(big.length);
    // A socket with nobody behind it is an errno, not a throw.
    expect(loadNative().journalSend(path.join(dir, 'no-such.sock'), entry.subarray(0, 100))).toBe(2);
  });
});
