/**
 * Reconcile planning benchmark (the pure half of `bench/reconcile`): 200 agent accounts, each
 * bound to one of 20 profiles. Measures observe (passwd, ports, bindings, profiles, resolve every
 * subject) + planReconcile when nothing changed and when one profile (bound to 10 agents)
 * changed, and how many subjects each pass would touch, against a restart-style baseline that
 * re-applies every subject, measured in the same run. The nft/listener time is the service's
 * and is not in these figures.
 *
 *   npm run build && node dist/bench/reconcile-plan.js
 */
import fs from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { configSchema } from '../src/control/config/schema.js';
import { observe } from '../src/control/reconcile/loop.js';
import type { AppliedState } from '../src/control/reconcile/plan.js';
import { executePlan } from '../src/control/reconcile/execute.js';
import { emptyApplied, planReconcile } from '../src/control/reconcile/plan.js';

const AGENTS = Number(process.env.BENCH_AGENTS ?? 200);
const PROFILES = 20;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);

const dir = fs.mkdtempSync(path.join(tmpdir(), 'leash-bench-reconcile-'));
process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
const stateDir = path.join(dir, 'state');
const passwd = path.join(dir, 'passwd');
fs.mkdirSync(path.join(stateDir, 'profiles'), { recursive: true });
const lines = ['root:x:0:0::/root:/bin/sh', 'fido:x:1000:1000::/home/fido:/bin/sh'];
const bindings: string[] = ['version: 1', 'bindings:'];
for (let i = 0; i < AGENTS; i++) {
  lines.push(`leash-b${i}:x:${20000 + i}:${20000 + i}::/home/leash-b${i}:/bin/sh`);
  bindings.push(`  agent:leash-b${i}: { profile: p${i % PROFILES}, acks: [] }`);
}
fs.writeFileSync(passwd, `${lines.join('\n')}\n`);
fs.writeFileSync(path.join(stateDir, 'bindings.yaml'), `${bindings.join('\n')}\n`);
const writeProfile = (n: number, extra: string) =>
  fs.writeFileSync(
    path.join(stateDir, 'profiles', `p${n}.yaml`),
    `network: { allow: [] }\ncommands: { deny: ["ssh", "nc${n}"${extra}] }\n`,
  );
for (let p = 0; p < PROFILES; p++) writeProfile(p, '');
const config = configSchema.parse({
  user: 'fido',
  network: { allow: ['github.com'] },
  commands: { mode: 'blacklist', deny: ['ssh'] },
});

async function pass(prev: AppliedState): Promise<{ ms: number; touched: number; state: AppliedState }> {
  const t0 = process.hrtime.bigint();
  const obs = await observe({ config, stateDir, passwd: { path: passwd } });
  const plan = planReconcile(prev, obs);
  const ex = await executePlan(plan, [], { critical: () => {} });
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  return { ms, touched: plan.actions.filter((a) => a.kind !== 'unchanged').length, state: ex.state };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;
const first = await pass(emptyApplied('multi'));
let state = first.state;
const rows: { scenario: string; ms: number; touched: number; baseline: number }[] = [];
for (const scenario of ['nothing changed', 'one profile changed'] as const) {
  const times: number[] = [];
  let touched = 0;
  for (let r = 0; r < ROUNDS; r++) {
    if (scenario === 'one profile changed') writeProfile(3, r % 2 ? '' : ', "extra"');
    const p = await pass(state);
    times.push(p.ms);
    touched = p.touched;
    state = p.state;
  }
  rows.push({ scenario, ms: median(times), touched, baseline: AGENTS + 1 });
}
console.log(
  `reconcile planning, ${AGENTS} agents + 1 user, ${PROFILES} profiles; ${cpus().length} CPUs, load ${loadavg()[0]?.toFixed(2)}`,
);
console.log(`first pass (all added): ${first.ms.toFixed(1)} ms, ${first.touched} subjects`);
console.log('scenario               median ms  touched  restart baseline touches  ratio');
for (const r of rows) {
  console.log(
    `${r.scenario.padEnd(22)} ${r.ms.toFixed(1).padStart(9)}  ${String(r.touched).padStart(7)}  ${String(r.baseline).padStart(24)}  ${(r.touched / r.baseline).toFixed(3)}`,
  );
}
