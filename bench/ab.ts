/**
 * bench/ab: the same benchmarks, in ONE run, for two commits (A = the baseline, B = the change), interleaved
 * round by round (A B, then B A, ...), so that load on the machine falls on both alike. Each commit is checked out
 * into its own worktree under --dir (default /var/tmp/leash-ab), installed with `npm ci` and built once, and each
 * benchmark is run there with `--json`; every numeric figure in the JSON is matched by name between A and B, and a
 * table prints the median of each with the ratio B/A. Root only (the benches it runs are); it takes the test lock
 * (/tmp/leash-test.lock) around each bench run, since the benches build the lab with fixed names.
 *
 *   npm run build && node dist/bench/ab.js --a <commit> --b <commit> [--rounds 2] [--bench proxy,mcp,fanotify,engine,reconcile]
 *       [--dir /var/tmp/leash-ab] [--only REGEX] [--json out.json] [-- extra args for every bench]
 * (--only keeps the figures whose `bench.path` matches REGEX, e.g. 'rates|calls_per_s|connsPerSec'.)
 *
 * What counts as "the same figure" is the JSON path: `rows.leash.connsPerSec`, `rows[mode=gate].calls_per_s`, ...
 * Arrays of numbers (a bench's runs) are reduced to their median; arrays of objects are labelled by their first
 * string field. Load averages and time stamps are left out.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const argv = process.argv.slice(2);
const dashdash = argv.indexOf('--');
const own = dashdash >= 0 ? argv.slice(0, dashdash) : argv;
const extra = dashdash >= 0 ? argv.slice(dashdash + 1) : [];
const opt = (name: string, dflt?: string): string | undefined => {
  const i = own.indexOf(name);
  return i >= 0 ? own[i + 1] : dflt;
};

/**
 * How each bench is run and where its figures are: a JSON file (`json`), or read from what it prints (`parse`, for a
 * bench that writes no JSON).
 */
const BENCHES: Record<
  string,
  { args: (json: string) => string[]; json?: (out: string, file: string) => string; parse?: (out: string) => unknown }
> = {
  proxy: { args: (j) => ['--json', j], json: (_o, f) => f },
  mcp: { args: (j) => ['--json', j], json: (_o, f) => f },
  fanotify: {
    args: () => [],
    json: (out) => {
      const m = /^json: (.+)$/m.exec(out);
      if (!m) throw new Error('bench/fanotify printed no "json: FILE" line');
      return m[1]!.trim();
    },
  },
  engine: { args: () => [], json: (_o, _f) => 'bench/results/engine.json' },
  reconcile: { args: () => [], parse: (out) => reconcileFigures(out) },
};

/**
 * bench/reconcile's figures from its table: each scenario's SIGHUP->reconciled passes (ms), the first start to
 * ready and the restart baseline.
 */
export function reconcileFigures(out: string): Record<string, number | number[]> {
  const figures: Record<string, number | number[]> = {};
  for (const m of out.matchAll(/^ {2}(.+): passes ([\d, ]+) ms$/gm))
    figures[`${m[1]!} ms`] = m[2]!.split(',').map((x) => Number(x.trim()));
  const first = /^first start: ready after ([\d.]+) ms/m.exec(out);
  if (first) figures['first start to ready ms'] = Number(first[1]);
  const restart = /^restart \(baseline, 1 run\)\s+([\d.]+)/m.exec(out);
  if (restart) figures['restart ms'] = Number(restart[1]);
  if (Object.keys(figures).length === 0) throw new Error('bench/reconcile printed no passes');
  return figures;
}

const SKIP = new Set(['load0', 'load1', 'loadavg', 'when', 'raw', 'runs', 'extra']);

/** Every numeric figure of a bench's JSON, by path. */
export function flatten(v: unknown, prefix = '', out: Map<string, number> = new Map()): Map<string, number> {
  if (typeof v === 'number') {
    if (Number.isFinite(v)) out.set(prefix, v);
  } else if (Array.isArray(v)) {
    if (v.length && v.every((x) => typeof x === 'number')) {
      out.set(prefix, median(v as number[]));
    } else {
      v.forEach((x, i) => {
        let label = String(i);
        if (x && typeof x === 'object' && !Array.isArray(x)) {
          const first = Object.entries(x).find(([, y]) => typeof y === 'string');
          if (first) label = `${first[0]}=${String(first[1])}`;
        }
        flatten(x, `${prefix}[${label}]`, out);
      });
    }
  } else if (v && typeof v === 'object') {
    for (const [k, x] of Object.entries(v)) {
      if (SKIP.has(k)) continue;
      // figures printed as strings in a table ("0.93x", "12.5") are figures too
      if (typeof x === 'string' && /^-?\d+(\.\d+)?x?$/.test(x)) {
        flatten(Number(x.replace(/x$/, '')), prefix ? `${prefix}.${k}` : k, out);
        continue;
      }
      flatten(x, prefix ? `${prefix}.${k}` : k, out);
    }
  }
  return out;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

function run(cmd: string, args: string[], cwd: string, timeoutMs = 0): string {
  const r = spawnSync(cmd, args, {
    cwd,
    encoding: 'utf8',
    maxBuffer: 64 << 20,
    timeout: timeoutMs || undefined,
    env: { ...process.env, npm_config_nodedir: process.env.npm_config_nodedir ?? '/usr' },
  });
  if (r.status !== 0)
    throw new Error(
      `${cmd} ${args.join(' ')} (in ${cwd}) exited ${r.status ?? r.signal}: ${(r.stderr ?? '').slice(-2000)}`,
    );
  return r.stdout;
}

/** A built checkout of `commit` under `dir`, made once and reused. */
function prepare(dir: string, commit: string): string {
  const sha = run('git', ['rev-parse', '--verify', `${commit}^{commit}`], repo).trim();
  const wt = path.join(dir, sha.slice(0, 12));
  const done = path.join(wt, '.ab-built');
  if (fs.existsSync(done)) return wt;
  if (fs.existsSync(wt)) run('git', ['worktree', 'remove', '--force', wt], repo);
  fs.mkdirSync(dir, { recursive: true });
  run('git', ['worktree', 'add', '--detach', wt, sha], repo);
  process.stderr.write(`ab: npm ci + build of ${sha.slice(0, 12)} in ${wt}\n`);
  run('npm', ['ci', '--no-audit', '--no-fund'], wt);
  run('npm', ['run', 'build'], wt);
  fs.writeFileSync(done, `${sha}\n`);
  return wt;
}

function runBench(wt: string, name: string): Map<string, number> {
  const b = BENCHES[name]!;
  const file = path.join(os.tmpdir(), `leash-ab-${name}-${process.pid}-${Date.now()}.json`);
  const out = run(
    'flock',
    ['/tmp/leash-test.lock', 'node', path.join('dist', 'bench', `${name}.js`), ...b.args(file), ...extra],
    wt,
  );
  if (b.parse) return flatten(b.parse(out));
  const jf = path.resolve(wt, b.json!(out, file));
  try {
    return flatten(JSON.parse(fs.readFileSync(jf, 'utf8')) as unknown);
  } finally {
    // Read once: a run of many rounds left one file per bench run in /tmp.
    fs.rmSync(jf, { force: true });
  }
}

/** The table of medians so far (after `done` rounds): printed after every round, so a run cut short still reports. */
function report(
  got: Record<string, { A: Map<string, number[]>; B: Map<string, number[]> }>,
  names: string[],
  a: string,
  b: string,
  done: number,
  rounds: number,
): { bench: string; figure: string; A: number; B: number; 'B/A': string }[] {
  const only = opt('--only') ? new RegExp(opt('--only')!) : null;
  const table: { bench: string; figure: string; A: number; B: number; 'B/A': string }[] = [];
  for (const n of names) {
    if (!got[n]) continue;
    const { A, B } = got[n]!;
    for (const [k, av] of A) {
      const bv = B.get(k);
      if (!bv || (only && !only.test(`${n}.${k}`))) continue;
      const am = median(av);
      const bm = median(bv);
      table.push({
        bench: n,
        figure: k,
        A: +am.toPrecision(4),
        B: +bm.toPrecision(4),
        'B/A': am ? (bm / am).toFixed(2) : '-',
      });
    }
  }
  console.log(
    `bench/ab: A=${a} B=${b}, ${done} of ${rounds} interleaved rounds, ${os.cpus().length} vCPU, load ${os
      .loadavg()
      .map((x) => x.toFixed(2))
      .join(' ')}`,
  );
  console.table(table);
  return table;
}

function main(): void {
  const a = opt('--a');
  const b = opt('--b');
  if (!a || !b) {
    process.stderr.write('usage: node dist/bench/ab.js --a COMMIT --b COMMIT [--rounds N] [--bench a,b] [--dir DIR]\n');
    process.exit(2);
  }
  const rounds = Number(opt('--rounds', '2'));
  const names = opt('--bench', 'proxy,mcp,fanotify,engine')!.split(',');
  for (const n of names)
    if (!BENCHES[n]) {
      process.stderr.write(`ab: unknown bench ${n} (known: ${Object.keys(BENCHES).join(', ')})\n`);
      process.exit(2);
    }
  const dir = opt('--dir', '/var/tmp/leash-ab')!;
  const wts = { A: prepare(dir, a), B: prepare(dir, b) };
  const got: Record<string, { A: Map<string, number[]>; B: Map<string, number[]> }> = {};
  // The table and every round's figure (A and B), written after each round.
  const save = (table: unknown, g: typeof got, done: number): void => {
    const j = opt('--json');
    if (!j) return;
    const perRound = Object.fromEntries(
      Object.entries(g).map(([n, { A, B }]) => [n, { A: Object.fromEntries(A), B: Object.fromEntries(B) }]),
    );
    fs.writeFileSync(j, JSON.stringify({ a, b, rounds, done, table, perRound }, null, 2));
  };
  for (let r = 0; r < rounds; r++) {
    for (const n of names) {
      got[n] ??= { A: new Map(), B: new Map() };
      const order = r % 2 ? (['B', 'A'] as const) : (['A', 'B'] as const);
      for (const side of order) {
        process.stderr.write(`ab: round ${r + 1}/${rounds} ${n} ${side}\n`);
        for (const [k, v] of runBench(wts[side], n)) {
          const m = got[n]![side];
          m.set(k, [...(m.get(k) ?? []), v]);
        }
      }
    }
    if (r + 1 < rounds) save(report(got, names, a, b, r + 1, rounds), got, r + 1);
  }
  save(report(got, names, a, b, rounds, rounds), got, rounds);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) main();
