/**
 * Reconcile benchmark on the REAL service: 200 agent accounts, each bound to its own profile, enforced by
 * `leash` (no subcommand) inside a bare network namespace this bench makes. It sends SIGHUP to the service's own
 * PID (the pid file) and times SIGHUP -> the service's `"msg":"reconciled"` log line, in four scenarios:
 *
 *   nothing changed         SIGHUP only
 *   profile, proxy-side     one profile (bound to one agent) changes its network allow and filesystem allow:
 *                           the subject is re-applied (listener policy, watcher map, chain checked)
 *   profile, chain change   one profile changes its network.udp (drop <-> allow): that subject's nft chains are
 *                           rewritten (its resolvers are not in its chain: they go to its DNS forwarder only)
 *   binding, proxy-side     `leash bind` moves one agent between two profiles: bindings.yaml, one file for every
 *                           subject, is rewritten; the subject is re-applied
 *
 * For each pass it counts the nft objects touched (chains/rules added or removed, by handle, map elements, between
 * `nft -a -j list ruleset` snapshots taken before and after) and whose they are, and, in one extra counted pass per
 * scenario, the number of nft invocations (an `nft` wrapper swapped onto the service's PATH only for that pass, so
 * the timed passes pay nothing for it). The baseline, measured in the same run: a restart (SIGTERM, start again,
 * wait for ready), which releases and re-adds every subject's objects.
 *
 * Filesystem enforcement is ON: every filesystem entry lies on a tmpfs this bench mounts, so the watcher's map
 * update is part of each timed pass. Accounts are passwd entries only (LEASH_PASSWD): the service matches
 * `meta skuid <uid>` numerically and never looks them up through NSS; no real account is created.
 *
 *   npm run build && node dist/bench/reconcile.js [--agents N]   (root; or BENCH_AGENTS; BENCH_REPS for passes)
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { cpus, loadavg } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { syntheticAccounts } from './args.js';
import { diff, parseSnapshot, type Touch } from './reconcile/nft-snapshot.js';

const argAgents = process.argv.indexOf('--agents');
const AGENTS = Number(argAgents > 0 ? process.argv[argAgents + 1] : (process.env.BENCH_AGENTS ?? 200));
/** The service's resident set (VmRSS, MB) and the nft listing it would take of one chain vs the whole ruleset. */
const rssMb = (pid: number, field: 'VmRSS' | 'VmHWM' = 'VmRSS') =>
  Number(new RegExp(`${field}:\\s+(\\d+)`).exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN) / 1024;
/** How long the service is left alone after it is ready before its resident set is read: RSS at rest, not mid-start. */
const SETTLE_MS = 2000;
const REPS = Number(process.env.BENCH_REPS ?? 5);
const UID_BASE = 62000;
const NS = 'lt-rb-a';
const CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../src/cli/main.js');
/** The profile of the proxy-side scenario and of the chain scenario (each bound to exactly one agent). */
const P_PROXY = 7;
const P_CHAIN = 9;
const P_BIND = 11;

if (process.getuid?.() !== 0) {
  console.error('bench/reconcile needs root (network namespace, nft, fanotify, tmpfs)');
  process.exit(2);
}

function run(argv: string[], env: NodeJS.ProcessEnv = {}, input?: string): { code: number; out: string; err: string } {
  const r = spawnSync(argv[0]!, argv.slice(1), {
    env: { ...process.env, ...env },
    encoding: 'utf8',
    maxBuffer: 256 << 20,
    ...(input !== undefined ? { input } : {}),
  });
  return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
}
const must = (argv: string[], env: NodeJS.ProcessEnv = {}) => {
  const r = run(argv, env);
  if (r.code !== 0) throw new Error(`${argv.join(' ')} -> ${r.code}: ${r.err}${r.out}`);
  return r;
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------------------------
// Teardown: LIFO, runs on normal exit, on error and on SIGINT/SIGTERM.
const undo: { what: string; fn: () => unknown }[] = [];
let tornDown = false;
async function teardown(): Promise<void> {
  if (tornDown) return;
  tornDown = true;
  for (const u of undo.reverse()) {
    try {
      await u.fn();
    } catch (e) {
      console.error(`teardown: ${u.what}: ${(e as Error).message}`);
    }
  }
}
for (const sig of ['SIGINT', 'SIGTERM'] as const)
  process.on(sig, () => {
    void teardown().then(() => process.exit(130));
  });

const snapshot = () => parseSnapshot(must(['ip', 'netns', 'exec', NS, 'nft', '-a', '-j', 'list', 'ruleset']).out);

// ---------------------------------------------------------------------------------------------------------------
// Everything from here on runs inside one try: whatever was made so far is undone however it ends.
try {
  const load0 = loadavg();
  const startedAt = new Date().toISOString();
  const dir = fs.mkdtempSync('/tmp/leash-rbench-');
  undo.push({ what: `rm ${dir}`, fn: () => fs.rmSync(dir, { recursive: true, force: true }) });
  fs.chmodSync(dir, 0o755);
  const mnt = path.join(dir, 'fs');
  fs.mkdirSync(mnt);
  must(['mount', '-t', 'tmpfs', '-o', 'size=16m,mode=0755', 'leash-rbench', mnt]);
  undo.push({ what: `umount ${mnt}`, fn: () => must(['umount', '-l', mnt]) });

  const agents = syntheticAccounts('leash-trb', UID_BASE, AGENTS);
  fs.writeFileSync(
    path.join(dir, 'passwd'),
    [
      'root:x:0:0:root:/root:/bin/bash',
      ...agents.map((a) => `${a.name}:x:${a.uid}:${a.uid}::/nonexistent:/usr/sbin/nologin`),
    ]
      .join('\n')
      .concat('\n'),
  );
  for (let i = 0; i < AGENTS; i++) {
    fs.mkdirSync(path.join(mnt, `a${i}`), { mode: 0o755 });
    fs.writeFileSync(path.join(mnt, `a${i}`, 'f'), `a${i}\n`);
  }

  const cfg = path.join(dir, 'leash.yaml');
  fs.writeFileSync(
    cfg,
    `user: null
fail_mode: closed
network: { mode: whitelist, allow: [good.lab, evil.lab], deny: [], dns_resolvers: [198.18.0.53, 198.18.0.54] }
filesystem: { mode: whitelist, allow: [${mnt}], deny: [] }
commands: { mode: blacklist, allow: [], deny: [] }
tools: { mode: whitelist, allow: [read_file], deny: [] }
logging: { level: info, decisions: ${path.join(dir, 'decisions.jsonl')} }
`,
  );
  const stateDir = path.join(dir, 'state');
  const env: NodeJS.ProcessEnv = {
    LEASH_STATE_DIR: stateDir,
    LEASH_PASSWD: path.join(dir, 'passwd'),
    LEASH_TOOLS_SOCKET: path.join(dir, 'tools.sock'),
    LEASH_PID_FILE: path.join(dir, 'leash.pid'),
    LEASH_WATCHER_TIMEOUT_S: '600',
  };
  // 200 profiles and bindings written the way `leash profile save` / `leash bind` leave them (200 CLI runs would take
  // minutes on this machine); the changed profiles below do go through `leash profile save`.
  const profileBody = (i: number) => `network: { allow: [good.lab] }\nfilesystem: { allow: [${mnt}/a${i}] }\n`;
  fs.mkdirSync(path.join(stateDir, 'profiles'), { recursive: true, mode: 0o750 });
  for (let i = 0; i < AGENTS; i++) fs.writeFileSync(path.join(stateDir, 'profiles', `p${i}.yaml`), profileBody(i));
  fs.writeFileSync(
    path.join(stateDir, 'bindings.yaml'),
    ['version: 1', 'bindings:', ...agents.map((a, i) => `  agent:${a.name}: { profile: p${i}, acks: [] }`)].join('\n') +
      '\n',
  );
  /**
   * `leash profile save` as an operator runs it: an edit back to a wider profile is refused with the exact consent
   * tokens, and re-run with them (the refusal is the CLI's own, so the bench does not hard-code the tokens).
   */
  const saveProfile = (name: string, file: string) => {
    const argv = [process.execPath, CLI, '-c', cfg, 'profile', 'save', name, '--from', file, '--no-reconcile'];
    const r = run(argv, env);
    if (r.code === 0) return;
    const m = /missing consent: (.*)/.exec(r.err);
    if (!m) throw new Error(`leash profile save ${name} -> ${r.code}: ${r.err}`);
    const acks = [...m[1]!.matchAll(/--ack '([^']+)'/g)].flatMap((a) => ['--ack', a[1]!]);
    must([...argv, ...acks], env);
  };
  /** `leash bind` as an operator runs it, with the consent it asks for (as saveProfile). */
  const bindAgent = (account: string, profile: string) => {
    const argv = [process.execPath, CLI, '-c', cfg, 'bind', `agent:${account}`, profile, '--no-reconcile'];
    const r = run(argv, env);
    if (r.code === 0) return;
    const m = /missing consent: (.*)/.exec(r.err);
    if (!m) throw new Error(`leash bind ${account} ${profile} -> ${r.code}: ${r.err}`);
    const acks = [...m[1]!.matchAll(/--ack '([^']+)'/g)].flatMap((a) => ['--ack', a[1]!]);
    must([...argv, ...acks], env);
  };
  const bindings = JSON.parse(must([process.execPath, CLI, '-c', cfg, 'bindings', '--json'], env).out) as unknown;
  const nBindings = Array.isArray(bindings)
    ? bindings.length
    : Object.keys((bindings as { bindings?: object }).bindings ?? bindings ?? {}).length;

  // nft on the service's PATH: a symlink to the real binary for timed passes, a counting wrapper for counted ones.
  const realNft = must(['sh', '-c', 'command -v nft']).out.trim();
  const binDir = path.join(dir, 'bin');
  fs.mkdirSync(binDir);
  const nftLog = path.join(dir, 'nft-calls.log');
  const wrapper = path.join(dir, 'nft-wrapper.sh');
  fs.writeFileSync(wrapper, `#!/bin/sh\necho "$1 $2 $3 $4" >> ${nftLog}\nexec ${realNft} "$@"\n`, { mode: 0o755 });
  const setNft = (counting: boolean) => {
    const tmp = path.join(binDir, 'nft.tmp');
    fs.rmSync(tmp, { force: true });
    fs.symlinkSync(counting ? wrapper : realNft, tmp);
    fs.renameSync(tmp, path.join(binDir, 'nft'));
    fs.writeFileSync(nftLog, '');
  };
  const nftCalls = () => fs.readFileSync(nftLog, 'utf8').split('\n').filter(Boolean).length;

  run(['ip', 'netns', 'del', NS]);
  must(['ip', 'netns', 'add', NS]);
  undo.push({ what: `ip netns del ${NS}`, fn: () => must(['ip', 'netns', 'del', NS]) });
  must(['ip', '-n', NS, 'link', 'set', 'lo', 'up']);

  // ---------------------------------------------------------------------------------------------------------------
  // The service.
  let svc: ChildProcess | null = null;
  let svcErr = '';
  const lines = () => svcErr.split('\n');
  function startService(): Promise<number> {
    svcErr = '';
    const t0 = performance.now();
    const child = spawn('ip', ['netns', 'exec', NS, 'timeout', '-s', 'KILL', '600', process.execPath, CLI, '-c', cfg], {
      env: { ...process.env, ...env, PATH: `${binDir}:${process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin'}` },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    svc = child;
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (svcErr += d));
    return (async () => {
      for (let i = 0; i < 6000 && !svcErr.includes('"msg":"ready"'); i++) {
        if (child.exitCode !== null || child.signalCode !== null) break;
        await sleep(50);
      }
      if (!svcErr.includes('"msg":"ready"')) throw new Error(`service not ready:\n${svcErr.slice(-3000)}`);
      return performance.now() - t0;
    })();
  }
  const servicePid = () => Number(fs.readFileSync(env.LEASH_PID_FILE!, 'utf8'));
  async function stopService(): Promise<void> {
    const child = svc;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    try {
      process.kill(servicePid(), 'SIGTERM');
    } catch {
      child.kill('SIGTERM');
    }
    const t = setTimeout(() => child.kill('SIGKILL'), 30_000);
    await exited;
    clearTimeout(t);
  }
  undo.push({ what: 'stop the service', fn: stopService });

  interface Pass {
    ms: number;
    arrivalMs: number;
    counts: Record<string, number>;
    touch: Touch;
    nftCalls: number | null;
    /** The service's own split of the pass (the reconciled line's `ms`): observe, plan, execute. */
    stages: Record<string, number>;
  }
  async function hup(counting: boolean): Promise<Pass> {
    setNft(counting);
    const snapBefore = snapshot();
    const count = (re: RegExp) => lines().filter((l) => re.test(l)).length;
    const before = count(/"msg":"reconciled"/);
    const reloadedBefore = count(/"msg":"reloaded"/);
    const pid = servicePid();
    await sleep(100);
    const wall0 = Date.now();
    const t0 = performance.now();
    process.kill(pid, 'SIGHUP');
    let arrivalMs = NaN;
    for (let i = 0; i < 60_000; i++) {
      if (count(/"msg":"reconciled"/) > before) {
        arrivalMs = performance.now() - t0;
        break;
      }
      await sleep(1);
    }
    if (Number.isNaN(arrivalMs)) throw new Error(`no reconcile after SIGHUP:\n${svcErr.slice(-3000)}`);
    while (count(/"msg":"reloaded"/) <= reloadedBefore) await sleep(5);
    const line = JSON.parse(lines().filter((l) => /"msg":"reconciled"/.test(l))[before]!) as Record<string, unknown>;
    if (/"msg":"reconcile changed nothing|fails alone/.test(svcErr)) throw new Error(`reconcile failed:\n${svcErr}`);
    const counts: Record<string, number> = {};
    for (const k of ['add', 'reapply', 'unchanged', 'fail', 'orphan'])
      if (typeof line[k] === 'number') counts[k] = line[k] as number;
    const touch = diff(snapBefore, snapshot());
    return {
      ms: Date.parse(line.time as string) - wall0,
      arrivalMs,
      counts,
      touch,
      nftCalls: counting ? nftCalls() : null,
      stages: (line.ms as Record<string, number> | undefined) ?? {},
    };
  }

  // ---------------------------------------------------------------------------------------------------------------
  const median = (xs: number[]) => {
    const s = [...xs].sort((a, b) => a - b);
    const m = Math.floor(s.length / 2);
    return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
  };

  interface Row {
    scenario: string;
    passes: Pass[];
    counted: Pass;
  }

  setNft(true);
  const startMs = await startService();
  const startCalls = nftCalls();
  await sleep(SETTLE_MS);
  const rssAtRest = rssMb(servicePid());
  const hwmAtStart = rssMb(servicePid(), 'VmHWM');
  const full = snapshot();
  const fullObjs = full.size;
  const subjectsWithChains = new Set([...full.values()].map((o) => o.uid).filter((u) => u !== null)).size;
  if (subjectsWithChains !== AGENTS) throw new Error(`expected ${AGENTS} subjects in nft, found ${subjectsWithChains}`);

  const scenarios: { name: string; change: (rep: number) => void; expect: { reapply: number; uids: number[] } }[] = [
    { name: 'nothing changed', change: () => {}, expect: { reapply: 0, uids: [] } },
    {
      name: 'one profile, proxy-side',
      change: (rep) => {
        const f = path.join(dir, 'pp.yaml');
        fs.writeFileSync(
          f,
          rep % 2 === 0
            ? `network: { allow: [api.good.lab] }\nfilesystem: { allow: [${mnt}/a${P_PROXY}/f] }\n`
            : profileBody(P_PROXY),
        );
        saveProfile(`p${P_PROXY}`, f);
      },
      // The listener's policy and the watcher map change; the chain is checked and found identical.
      expect: { reapply: 1, uids: [] },
    },
    {
      name: 'one profile, chain change',
      change: (rep) => {
        const f = path.join(dir, 'pc.yaml');
        fs.writeFileSync(
          f,
          // The chain holds the subject's ports and its udp choice (renderSubject); `udp: allow` is a widening, saved
          // with the consent the CLI asks for.
          `network: { allow: [good.lab], udp: ${rep % 2 === 0 ? 'allow' : 'drop'} }\nfilesystem: { allow: [${mnt}/a${P_CHAIN}] }\n`,
        );
        saveProfile(`p${P_CHAIN}`, f);
      },
      expect: { reapply: 1, uids: [UID_BASE + P_CHAIN] },
    },
    {
      // bindings.yaml is one file for every subject: a bind (or an ack) rewrites it, and only the changed entry is
      // parsed again.
      name: 'one binding, proxy-side',
      change: (rep) => bindAgent(agents[P_BIND]!.name, `p${rep % 2 === 0 ? P_BIND + 1 : P_BIND}`),
      expect: { reapply: 1, uids: [] },
    },
  ];

  const rows: Row[] = [];
  for (const s of scenarios) {
    const passes: Pass[] = [];
    for (let r = 0; r <= REPS; r++) {
      s.change(r);
      const p = await hup(r === REPS);
      const uids = [...p.touch.uids].sort();
      if ((p.counts.reapply ?? 0) !== s.expect.reapply || JSON.stringify(uids) !== JSON.stringify(s.expect.uids))
        throw new Error(
          `${s.name}: expected reapply=${s.expect.reapply} touching ${JSON.stringify(s.expect.uids)}, got ${JSON.stringify(p.counts)} touching ${JSON.stringify(uids)}`,
        );
      if (r < REPS) passes.push(p);
      else rows.push({ scenario: s.name, passes, counted: p });
    }
  }

  // Baseline in the same run: a restart (stop releases every chain, start re-adds every subject).
  setNft(false);
  // Compared through the empty state in between: a table deleted and made again reuses its handles.
  const before = snapshot();
  const t0 = performance.now();
  await stopService();
  const stopMs = performance.now() - t0;
  const stopped = snapshot();
  const readyMs = await startService();
  const restartMs = performance.now() - t0;
  const down = diff(before, stopped);
  const up = diff(stopped, snapshot());
  const restart: Touch = { added: up.added, removed: down.removed, uids: new Set([...down.uids, ...up.uids]) };

  await sleep(SETTLE_MS);
  const rssAtEnd = rssMb(servicePid());
  const load1 = loadavg();
  const f1 = (n: number) => n.toFixed(1);
  console.log(
    `bench/reconcile: real service in netns ${NS}, ${AGENTS} agent accounts (${nBindings} bindings, one profile each), ` +
      `filesystem enforcement on (tmpfs ${mnt}), ${REPS} passes per scenario`,
  );
  console.log(
    `machine: ${cpus().length} CPUs; loadavg at start ${load0.map((l) => l.toFixed(2)).join(' ')}, ` +
      `at end ${load1.map((l) => l.toFixed(2)).join(' ')}; started ${startedAt}`,
  );
  console.log(
    `first start: ready after ${f1(startMs)} ms (nft wrapper on), ${startCalls} nft invocations, ${fullObjs} nft objects ` +
      `(chains, rules, map elements) for ${subjectsWithChains} subjects`,
  );
  console.log('');
  console.log(
    'scenario                   SIGHUP->reconciled ms   (read by bench)  plan                   nft objects touched         nft calls',
  );
  console.log(
    '                           median      max         median  max                            added removed subjects',
  );
  for (const r of rows) {
    const ms = r.passes.map((p) => p.ms);
    const ar = r.passes.map((p) => p.arrivalMs);
    const added = Math.max(...r.passes.map((p) => p.touch.added), r.counted.touch.added);
    const removed = Math.max(...r.passes.map((p) => p.touch.removed), r.counted.touch.removed);
    const subjects = [...new Set(r.passes.flatMap((p) => [...p.touch.uids]))];
    const plan = Object.entries(r.counted.counts)
      .map(([k, v]) => `${k}=${v}`)
      .join(' ');
    console.log(
      `${r.scenario.padEnd(26)} ${f1(median(ms)).padStart(6)} ${f1(Math.max(...ms)).padStart(8)}         ${f1(median(ar)).padStart(6)} ${f1(Math.max(...ar)).padStart(6)}  ${plan.padEnd(22)} ${String(added).padStart(5)} ${String(removed).padStart(7)} ${(subjects.length ? subjects.join(',') : 'none').padStart(8)}    ${String(r.counted.nftCalls).padStart(5)}`,
    );
  }
  console.log(
    `${'restart (baseline, 1 run)'.padEnd(26)} ${f1(restartMs).padStart(6)}   (stop ${f1(stopMs)} + start to ready ${f1(readyMs)})       ${String(restart.added).padStart(5)} ${String(restart.removed).padStart(7)} ${String([...restart.uids].filter((u) => u !== 'shared').length + ' +shared').padStart(8)}    ${String(startCalls).padStart(5)}+stop`,
  );
  for (const r of rows) console.log(`  ${r.scenario}: passes ${r.passes.map((p) => p.ms.toFixed(0)).join(', ')} ms`);
  for (const r of rows) {
    const names = [...new Set(r.passes.flatMap((p) => Object.keys(p.stages)))];
    const split = names.map((n) => `${n} ${f1(median(r.passes.map((p) => p.stages[n] ?? NaN)))}`).join(', ');
    if (split) console.log(`  ${r.scenario}: the service's split, median ms: ${split}`);
    // The slowest pass on its own: a median hides what a first pass after a quiet spell pays, and where.
    const slow = r.passes.reduce((a, b) => (b.ms > a.ms ? b : a));
    const slowSplit = names.map((n) => `${n} ${f1(slow.stages[n] ?? NaN)}`).join(', ');
    if (slowSplit) console.log(`  ${r.scenario}: its slowest pass (${slow.ms.toFixed(0)} ms), ms: ${slowSplit}`);
  }
  console.log('');
  console.log(
    `service RSS at rest (${SETTLE_MS} ms after ready): ${rssAtRest.toFixed(1)} MB after the first start, ${rssAtEnd.toFixed(1)} MB after the passes and a restart ` +
      `(${AGENTS} subjects; target <= 150 MB: ${Math.max(rssAtRest, rssAtEnd) <= 150 ? 'met' : 'MISSED'}); peak while starting (VmHWM) ${hwmAtStart.toFixed(1)} MB`,
  );
  const chainRow = rows.find((r) => r.scenario === 'one profile, chain change')!;
  const chainTouched = chainRow.counted.touch.added + chainRow.counted.touch.removed;
  const oneMed = Math.max(...rows.slice(1).map((r) => median(r.passes.map((p) => p.ms))));
  console.log(
    `one-subject change: slowest median ${f1(oneMed)} ms (target <= 200 ms: ${oneMed <= 200 ? 'met' : 'MISSED'}); ` +
      `restart / one-subject time ${(restartMs / oneMed).toFixed(0)}x; objects touched ${chainTouched} vs ${restart.added + restart.removed} for a restart ` +
      `(${((restart.added + restart.removed) / Math.max(1, chainTouched)).toFixed(0)}x)`,
  );
  console.log(
    'ms = pino `time` of the reconciled line minus the wall clock just before kill(SIGHUP); "read by bench" = when the bench saw the line on the pipe.',
  );
} finally {
  await teardown();
}
