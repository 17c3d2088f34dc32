/**
 * bench/transitions at scale (issue 40, "Boot order"): the time from a service process's start to "every subject
 * confined" at N agents, from a cold start, a restart and a crash, on the real service in the lab's agent namespace.
 *
 * Confined means, for every subject: its UID is in the nft dispatch map (redirect in force), its proxy listener is
 * up, and the watcher's map holds it. The service says `ready` only once every surface has applied (and the watcher
 * acknowledged) every subject; at that moment this bench checks all three against what it can see from outside: the
 * kernel's map (`nft -j list map`), the listening sockets of the service's namespace (/proc/PID/net/tcp, each
 * subject's port from ports.json) and the watcher-acknowledged UIDs the service wrote to its status file. Two agents
 * (the first and the last) meanwhile run a paced loop as their own UID: a read of a file their policy denies and a
 * page from a host it denies; what got through, and when, is reported, so a `ready` that came before confinement
 * would show.
 *
 *   cold start  a fresh state directory, no chains: spawn -> ready
 *   restart     SIGTERM (a deliberate stop releases everything), ExecStopPost's teardown, then a start
 *   crash       SIGKILL of the service's process group, ExecStopPost's teardown with SERVICE_RESULT=signal (chains
 *               kept), then a start (systemd's RestartSec is left out: the figure is the start's own)
 *
 * Accounts are passwd entries only (LEASH_PASSWD, UIDs checked free in /etc/passwd): the service matches UIDs
 * numerically and the agents' loops run under setpriv with the bare UID, so no account is created. Every agent has
 * a profile of its own (the slowest case: nothing is shared). Files lie on a tmpfs this bench mounts.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { serializeBindings, type BindingsDoc } from '../src/control/policy/bindings.js';
import { LAB, stopChild, type Lab } from '../tests/lab/netns.js';
import { run, syntheticAccounts } from './args.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One agent's view of a transition (epoch ms for the last operation that got through, null: none did). */
interface Seen {
  reads: number;
  readsThrough: number;
  pages: number;
  pagesThrough: number;
  lastRead: number | null;
  lastPage: number | null;
}

/**
 * The agent's loop, paced (PACE_MS between rounds) so that two of them do not take the CPU the start needs. It runs
 * until SIGTERM, then prints what got through. node:* only: the agent's UID runs a copy.
 */
const PACED_LOOP = `import fs from 'node:fs';
import net from 'node:net';
const [file, host, port, hostHeader, pace] = process.argv.slice(2);
const c = { reads: 0, readsThrough: 0, pages: 0, pagesThrough: 0, lastRead: null, lastPage: null };
process.on('SIGTERM', () => { process.stdout.write(JSON.stringify(c) + '\\n'); process.exit(0); });
const page = () => new Promise((res) => {
  const s = net.connect({ host, port: Number(port) });
  let buf = '';
  const done = (v) => { clearTimeout(t); s.destroy(); res(v); };
  const t = setTimeout(() => done(false), 400);
  s.on('connect', () => s.write('GET / HTTP/1.1\\r\\nHost: ' + hostHeader + '\\r\\nConnection: close\\r\\n\\r\\n'));
  s.on('data', (d) => { buf += d; if (buf.startsWith('HTTP/1.1 200')) done(true); });
  s.on('error', () => done(false));
  s.on('close', () => done(buf.startsWith('HTTP/1.1 200')));
});
for (;;) {
  c.reads++;
  try { fs.readFileSync(file); c.readsThrough++; c.lastRead = Date.now(); } catch {}
  c.pages++;
  if (await page()) { c.pagesThrough++; c.lastPage = Date.now(); }
  await new Promise((r) => setTimeout(r, Number(pace)));
}
`;
const PACE_MS = 10;

export interface ScaleRow {
  agents: number;
  transition: 'cold start' | 'restart' | 'crash';
  /** Process start -> `ready` (every subject applied on every surface). */
  readyMs: number;
  /** Of the sampled agents: reads and pages let through from the process start on, and the last of each (ms). */
  through: { reads: number; pages: number; lastRead: number | null; lastPage: number | null };
  /** What the check at ready found: subjects in the nft map, listening, in the watcher's map (of `agents`). */
  check: { map: number; listening: number; watcher: number };
}

/**
 * A directory under the lab's and a tmpfs of `size` on its `fs/` (holding a file `held`), both removed with the
 * lab: the only filesystem the bench's watcher marks.
 */
export function benchTmpfs(lab: Lab, prefix: string, label: string, size: string): { dir: string; mnt: string } {
  const dir = fs.mkdtempSync(path.join(lab.dir, prefix));
  fs.chmodSync(dir, 0o755);
  lab.defer(`rm ${dir}`, () => fs.rmSync(dir, { recursive: true, force: true }));
  const mnt = path.join(dir, 'fs');
  fs.mkdirSync(mnt);
  if (run(['mount', '-t', 'tmpfs', '-o', `size=${size},mode=0755`, label, mnt]).code !== 0) throw new Error('mount');
  lab.defer(`umount ${mnt}`, () => run(['umount', '-l', mnt]));
  fs.writeFileSync(path.join(mnt, 'held'), 'x\n', { mode: 0o644 });
  return { dir, mnt };
}

/** Listening TCP ports in the namespace of process `pid` (IPv4 and IPv6). */
function listeningPorts(pid: number): Set<number> {
  const out = new Set<number>();
  for (const f of ['tcp', 'tcp6']) {
    let text = '';
    try {
      text = fs.readFileSync(`/proc/${pid}/net/${f}`, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols[3] === '0A') out.add(parseInt(cols[1]!.split(':').pop()!, 16));
    }
  }
  return out;
}

/** The service started in the lab's agent namespace with `cfg` and `env`, its stderr kept (what `ready` is read from). */
export function serviceSpawner(
  lab: Lab,
  cli: string,
  cfg: string,
  env: NodeJS.ProcessEnv,
): { spawn: () => ChildProcess; err: () => string } {
  let err = '';
  return {
    spawn() {
      err = '';
      const c = spawn('ip', ['netns', 'exec', lab.agentNs, process.execPath, cli, '-c', cfg], {
        env: { ...process.env, ...env },
        stdio: ['ignore', 'ignore', 'pipe'],
        detached: true,
      });
      lab.defer(`stop service ${c.pid}`, () => stopChild(c, 10_000));
      c.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
      return c;
    },
    err: () => err,
  };
}

/** Runs the three transitions at `agents` agents; `cli` is dist/src/cli/main.js. */
export async function scaleRows(lab: Lab, cli: string, agents: number, uidBase: number): Promise<ScaleRow[]> {
  const accounts = syntheticAccounts('leash-tctr', uidBase, agents);
  const { dir, mnt } = benchTmpfs(lab, `scale${agents}-`, 'leash-tctr-bench', '16m');
  for (let i = 0; i < agents; i++) {
    fs.mkdirSync(path.join(mnt, `a${i}`), { mode: 0o755 });
    fs.writeFileSync(path.join(mnt, `a${i}`, 'f'), 'x\n', { mode: 0o644 });
  }
  fs.writeFileSync(
    path.join(dir, 'passwd'),
    ['root:x:0:0:root:/root:/bin/bash', ...accounts.map((a) => `${a.name}:x:${a.uid}:${a.uid}::/nonexistent:/bin/sh`)]
      .join('\n')
      .concat('\n'),
  );
  const cfg = path.join(dir, 'leash.yaml');
  fs.writeFileSync(
    cfg,
    `user: null
fail_mode: closed
network: { mode: whitelist, allow: [good.lab], deny: [], dns_resolvers: [${LAB.dnsV4}] }
filesystem: { mode: whitelist, allow: [${mnt}], deny: [] }
commands: { mode: blacklist, allow: [], deny: [] }
tools: { mode: whitelist, allow: [read_file], deny: [] }
logging: { level: info, decisions: ${path.join(dir, 'decisions.jsonl')} }
`,
  );
  const stateDir = path.join(dir, 'state');
  const writeState = () => {
    fs.rmSync(stateDir, { recursive: true, force: true });
    fs.mkdirSync(path.join(stateDir, 'profiles'), { recursive: true, mode: 0o750 });
    // Written the way `leash profile save` / `leash bind` leave them (1,000 CLI runs would take many minutes).
    for (let i = 0; i < agents; i++)
      fs.writeFileSync(
        path.join(stateDir, 'profiles', `p${i}.yaml`),
        `network: { allow: [good.lab] }\nfilesystem: { allow: [${mnt}/a${i}] }\n`,
      );
    const doc: BindingsDoc = { version: 1, bindings: {} };
    accounts.forEach((a, i) => (doc.bindings[`agent:${a.name}`] = { profile: `p${i}`, acks: [] }));
    fs.writeFileSync(path.join(stateDir, 'bindings.yaml'), serializeBindings(doc));
  };
  const env: NodeJS.ProcessEnv = {
    LEASH_STATE_DIR: stateDir,
    LEASH_PASSWD: path.join(dir, 'passwd'),
    LEASH_TOOLS_SOCKET: path.join(dir, 'tools.sock'),
    LEASH_APPROVALS_SOCKET: path.join(dir, 'approvals.sock'),
    LEASH_PID_FILE: path.join(dir, 'leash.pid'),
    LEASH_WATCHER_TIMEOUT_S: '1200',
  };
  const statusFile = path.join(dir, 'reconcile.json');
  const leash = (args: string[], extra: NodeJS.ProcessEnv = {}) =>
    run(['ip', 'netns', 'exec', lab.agentNs, process.execPath, cli, '-c', cfg, ...args], { ...env, ...extra });
  const script = path.join(dir, 'loop.mjs');
  fs.writeFileSync(script, PACED_LOOP, { mode: 0o644 });
  const other = LAB.hosts.find((h) => h.name === 'other.lab')!.v4;
  const sampled = agents > 1 ? [accounts[0]!, accounts[agents - 1]!] : [accounts[0]!];

  let svc: ChildProcess | null = null;
  const svcOut = serviceSpawner(lab, cli, cfg, env);
  const spawnSvc = svcOut.spawn;
  /** Starts the service; the epoch ms of its spawn and of its `ready` line. */
  const start = async (): Promise<{ t0: number; ready: number }> => {
    fs.rmSync(env.LEASH_PID_FILE!, { force: true });
    const t0 = Date.now();
    svc = spawnSvc();
    for (;;) {
      const line = svcOut
        .err()
        .split('\n')
        .slice(0, -1)
        .find((l) => l.includes('"msg":"ready"'));
      if (line) return { t0, ready: Date.parse((JSON.parse(line) as { time: string }).time) };
      if (svc.exitCode !== null) throw new Error(`service exited: ${svcOut.err().slice(-3000)}`);
      await sleep(5);
    }
  };
  const loops = () =>
    sampled.map((a) => {
      const c = spawn(
        'ip',
        ['netns', 'exec', lab.agentNs, 'setpriv', `--reuid=${a.uid}`, `--regid=${a.uid}`, '--clear-groups'].concat([
          process.execPath,
          script,
          path.join(mnt, 'held'),
          other,
          '80',
          'other.lab',
          String(PACE_MS),
        ]),
        { stdio: ['ignore', 'pipe', 'ignore'] },
      );
      lab.defer(`stop loop ${c.pid}`, () => stopChild(c, 2000));
      let out = '';
      c.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
      const done = new Promise<Seen>((res) => c.on('exit', () => res(JSON.parse(out.trim() || 'null') as Seen)));
      return { stop: () => (c.kill('SIGTERM'), done) };
    });
  const check = (): ScaleRow['check'] => {
    // `ip netns exec` execs the service: the child is the service itself (its pid file is written after ready).
    const pid = svc!.pid!;
    const r = run(['ip', 'netns', 'exec', lab.agentNs, 'nft', '-j', 'list', 'map', 'ip', 'leash', 'agents']);
    const doc = JSON.parse(r.out || '{"nftables":[]}') as { nftables: { map?: { elem?: [unknown, unknown][] } }[] };
    const inMap = new Set(doc.nftables.flatMap((x) => (x.map?.elem ?? []).map((e) => e[0] as number)));
    const ports = (
      JSON.parse(fs.readFileSync(path.join(stateDir, 'ports.json'), 'utf8')) as {
        ports: Record<string, { port: number }>;
      }
    ).ports;
    const up = listeningPorts(pid);
    const st = JSON.parse(fs.readFileSync(statusFile, 'utf8')) as { confined?: { filesystem?: number[] } };
    const fsUids = new Set(st.confined?.filesystem ?? []);
    return {
      map: accounts.filter((a) => inMap.has(a.uid)).length,
      listening: accounts.filter((a) => ports[a.name] && up.has(ports[a.name]!.port)).length,
      watcher: accounts.filter((a) => fsUids.has(a.uid)).length,
    };
  };
  const measure = async (transition: ScaleRow['transition'], before: () => Promise<void>): Promise<ScaleRow> => {
    const l = loops();
    await sleep(300);
    await before();
    const { t0, ready } = await start();
    const ck = check();
    // Anything let through after ready would show in the loops' last times.
    await sleep(500);
    const seen = await Promise.all(l.map((x) => x.stop()));
    let reads = 0;
    let pages = 0;
    let lastRead: number | null = null;
    let lastPage: number | null = null;
    const later = (a: number | null, b: number | null) => (b === null || b < t0 ? a : Math.max(a ?? 0, b - t0));
    for (const s of seen) {
      if (!s) throw new Error('an agent loop printed nothing');
      lastRead = later(lastRead, s.lastRead);
      lastPage = later(lastPage, s.lastPage);
      reads += s.readsThrough;
      pages += s.pagesThrough;
    }
    return {
      agents,
      transition,
      readyMs: ready - t0,
      through: { reads, pages, lastRead, lastPage },
      check: ck,
    };
  };
  const stopPost = (result: string, code: string, status: string) =>
    leash(['teardown'], { SERVICE_RESULT: result, EXIT_CODE: code, EXIT_STATUS: status });

  const rows: ScaleRow[] = [];
  writeState();
  rows.push(await measure('cold start', async () => {}));
  rows.push(
    await measure('restart', async () => {
      await stopChild(svc!, 30_000);
      stopPost('success', 'exited', '0');
    }),
  );
  rows.push(
    await measure('crash', async () => {
      process.kill(-svc!.pid!, 'SIGKILL');
      while (svc!.exitCode === null && svc!.signalCode === null) await sleep(5);
      stopPost('signal', 'killed', 'KILL');
    }),
  );
  await stopChild(svc!, 30_000);
  stopPost('success', 'exited', '0');
  return rows;
}

export function scaleTable(rows: ScaleRow[]): string {
  const w = [7, 11, 9, 15, 22, 26];
  const line = (r: string[]) => r.map((c, i) => c.padEnd(w[i] ?? 0)).join('  ');
  const at = (ms: number | null) => (ms === null ? '-' : String(ms));
  const out = [
    line(['agents', 'start', 'ms ready', 'reads/pages', 'last read/page (ms)', 'at ready: map/listen/watcher']),
  ];
  for (const r of rows)
    out.push(
      line([
        String(r.agents),
        r.transition,
        String(r.readyMs),
        `${r.through.reads}/${r.through.pages}`,
        `${at(r.through.lastRead)}/${at(r.through.lastPage)}`,
        `${r.check.map}/${r.check.listening}/${r.check.watcher} of ${r.agents}`,
      ]),
    );
  return out.join('\n');
}
