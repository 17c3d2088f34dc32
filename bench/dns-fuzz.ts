/**
 * The DNS forwarder's fuzz at full size: `node dist/bench/dns-fuzz.js [count] [seed] [live]`.
 * 1. `count` (default 1,000,000) generated and mutated messages through parseQuery: none may throw, and anything
 *    accepted must re-encode to its own question bytes, with the forwarder's upstream query parsing back to it.
 * 2. `live` (default 50,000) of them sent over UDP to a real forwarder on loopback (a blacklist subject, so every
 *    accepted name is forwarded) with a counting upstream: every message the upstream receives must be a strict
 *    query the forwarder built (fresh id) for a question one of the accepted inputs asked, and the forwarder must
 *    still answer afterwards. Prints a table; exits 1 on any violation. No root needed.
 */
import dgram from 'node:dgram';
import { compilePolicy, decideDnsName, type CompiledPolicy } from '../src/engine/index.js';
import { createDnsForwarder } from '../src/dataplane/network/dns/forwarder.js';
import { encodeQuestion, parseQuery } from '../src/dataplane/network/dns/wire.js';
import { fuzzMessage, runFuzz } from '../src/lab/dns-fuzz.js';
import { mulberry32 } from '../src/lab/prng.js';
import { answerDns } from '../src/lab/upstream.js';

async function live(
  seed: number,
  count: number,
): Promise<{
  sent: number;
  accepted: number;
  upstream: number;
  lines: { allow: number; block: number };
  bad: string[];
}> {
  const upstreamGot: Buffer[] = [];
  const lines = { allow: 0, block: 0, ask: 0, would_block: 0 };
  const up = dgram.createSocket('udp4');
  up.on('message', (m, r) => {
    upstreamGot.push(Buffer.from(m));
    const a = answerDns(m, {});
    if (a) up.send(a, r.port, r.address);
  });
  await new Promise<void>((res) => up.bind(0, '127.0.0.1', () => res()));
  const fwd = createDnsForwarder<CompiledPolicy>({
    decide: decideDnsName,
    log: {
      write: (r) => {
        lines[r.action]++;
        return '';
      },
    },
    hosts: ['127.0.0.1'],
    allowLinesPerSec: 1e9,
    timeoutMs: 300,
  });
  const port = 40000 + (seed % 20000);
  await fwd.setSubject({
    uid: 1,
    port,
    policy: compilePolicy({ network: { mode: 'blacklist', allow: [], deny: [] } } as never),
    resolvers: [`127.0.0.1:${up.address().port}`],
  });
  const client = dgram.createSocket('udp4');
  client.on('message', () => {});
  await new Promise<void>((res) => client.bind(0, '127.0.0.1', () => res()));
  const rnd = mulberry32(seed);
  const asked = new Set<string>();
  let accepted = 0;
  for (let i = 0; i < count; i++) {
    const m = fuzzMessage(rnd);
    const r = parseQuery(m);
    if (r.ok) {
      accepted++;
      asked.add(encodeQuestion(r.query.question).toString('hex').toLowerCase());
    }
    await new Promise<void>((res) => client.send(m, port, '127.0.0.1', () => res()));
    if (i % 20 === 0) await new Promise((res) => setTimeout(res, 1));
  }
  await new Promise((res) => setTimeout(res, 1000));
  const bad: string[] = [];
  for (const m of upstreamGot) {
    const r = parseQuery(m);
    if (!r.ok) bad.push(`upstream got a message that is not a strict query: ${m.toString('hex')}`);
    else if (!asked.has(encodeQuestion(r.query.question).toString('hex').toLowerCase()))
      bad.push(`upstream got a question nobody asked: ${m.toString('hex')}`);
  }
  // Still serving after the run.
  const probe = Buffer.from('abcd01000001000000000000076578616d706c6503636f6d0000010001', 'hex');
  const alive = await new Promise<boolean>((res) => {
    const t = setTimeout(() => res(false), 2000);
    client.once('message', () => (clearTimeout(t), res(true)));
    client.send(probe, port, '127.0.0.1');
  });
  if (!alive) bad.push('the forwarder no longer answers after the run');
  client.close();
  await fwd.close();
  up.close();
  return { sent: count, accepted, upstream: upstreamGot.length, lines, bad };
}

async function main(): Promise<void> {
  const count = Number(process.argv[2] ?? 1_000_000);
  const seed = Number(process.argv[3] ?? 20261201);
  const liveCount = Number(process.argv[4] ?? 50_000);
  const t0 = performance.now();
  const s = runFuzz(seed, count);
  const t1 = performance.now();
  const l = await live(seed + 1, liveCount);
  const t2 = performance.now();
  const rows = [
    ['stage', 'messages', 'accepted', 'refused', 'violations', 'seconds'],
    ['parser (in process)', s.messages, s.accepted, s.refused, s.violations.length, ((t1 - t0) / 1000).toFixed(1)],
    ['forwarder (UDP, live)', l.sent, l.accepted, l.sent - l.accepted, l.bad.length, ((t2 - t1) / 1000).toFixed(1)],
  ];
  process.stdout.write(`DNS fuzz, seed ${seed}\n`);
  for (const r of rows) process.stdout.write(`| ${r.join(' | ')} |\n`);
  process.stdout.write(
    `live: forwarder wrote ${l.lines.allow} allow and ${l.lines.block} block lines; upstream received ${l.upstream} queries, each a strict query for an accepted question\n`,
  );
  for (const v of s.violations) process.stdout.write(`VIOLATION #${v.index}: ${v.why} ${v.hex}\n`);
  for (const b of l.bad.slice(0, 20)) process.stdout.write(`VIOLATION: ${b}\n`);
  process.exit(s.violations.length || l.bad.length ? 1 : 0);
}

main().catch((e: unknown) => {
  process.stderr.write(`dns-fuzz: ${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});
