/**
 * The port-squatting hole during a crash (issue 40), from the attacker's side. A SIGKILLed service leaves its nft
 * chains in place, redirecting the agent's TCP to its proxy port and its DNS to its forwarder port, both
 * unprivileged. Until the next service listens, a local process that binds those ports first would receive the
 * agent's connections and queries: another account (a channel out of the agent's policy), or the agent itself. The
 * input guard lets redirected traffic reach only a socket carrying Leash's listener mark, which takes CAP_NET_ADMIN.
 * The service runs for real in the lab's agent namespace with its own state dir, passwd (one agent) and a tmpfs of
 * its own for the watcher's marks.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB, canRunLab, stopChild, useLab, type LabUser, waitForServiceReady } from '../lab/index.js';

const CLI = path.resolve(__dirname, '../../dist/src/cli/main.js');

/** Binds the TCP port on both loopbacks and the UDP port on 127.0.0.1; counts what arrives until stdin closes. */
const SQUATTER = `import dgram from 'node:dgram';
import net from 'node:net';
const [tcpPort, udpPort] = process.argv.slice(2).map(Number);
const c = { accepted: 0, bytes: 0, datagrams: 0, bound: [] };
const srvs = [];
for (const host of ['127.0.0.1', '::1']) {
  const srv = net.createServer((s) => {
    c.accepted++;
    s.on('data', (d) => (c.bytes += d.length));
    s.on('error', () => {});
    s.write('HTTP/1.1 200 OK\\r\\nContent-Length: 6\\r\\n\\r\\nsquat\\n');
  });
  await new Promise((res) => {
    srv.once('error', (e) => { c.bound.push(host + ' tcp ' + e.code); res(); });
    srv.listen(tcpPort, host, () => { c.bound.push(host + ' tcp'); res(); });
  });
  srvs.push(srv);
}
const udp = dgram.createSocket('udp4');
udp.on('message', () => c.datagrams++);
await new Promise((res) => {
  udp.once('error', (e) => { c.bound.push('udp ' + e.code); res(); });
  udp.bind(udpPort, '127.0.0.1', () => { c.bound.push('udp'); res(); });
});
process.stdout.write('listening ' + JSON.stringify(c.bound) + '\\n');
process.stdin.resume();
process.stdin.on('end', () => { process.stdout.write(JSON.stringify(c) + '\\n'); process.exit(0); });
`;

/** The agent's attempts: TCP to a host (what came back), then a DNS query to its resolver (answered or not). */
const ATTEMPTS = `import dgram from 'node:dgram';
import net from 'node:net';
const [host, port, resolver, n] = process.argv.slice(2);
const out = { tcp: [], dns: [] };
const tcp = () => new Promise((res) => {
  const s = net.connect({ host, port: Number(port) });
  let buf = '';
  const done = (v) => { clearTimeout(t); s.destroy(); res(v); };
  const t = setTimeout(() => done(buf.startsWith('HTTP/1.1 200') ? 'page' : buf ? 'other' : 'timeout'), 1500);
  s.on('connect', () => s.write('GET / HTTP/1.1\\r\\nHost: other.lab\\r\\nConnection: close\\r\\n\\r\\n'));
  const seen = () => (buf.startsWith('HTTP/1.1 200') ? 'page' : buf ? 'other' : 'closed');
  s.on('data', (d) => { buf += d; if (buf.includes('squat')) done('squatter'); });
  s.on('error', (e) => done(e.code ?? 'error'));
  s.on('close', () => done(seen()));
});
const dns = () => new Promise((res) => {
  const u = dgram.createSocket('udp4');
  const q = Buffer.from('12340100000100000000000004676f6f64036c61620000010001', 'hex');
  const done = (v) => { clearTimeout(t); u.close(); res(v); };
  const t = setTimeout(() => done('silence'), 3000);
  u.on('message', () => done('answered'));
  u.on('error', (e) => done(e.code ?? 'error'));
  u.send(q, 53, resolver);
});
for (let i = 0; i < Number(n); i++) {
  out.tcp.push(await tcp());
  out.dns.push(await dns());
}
process.stdout.write(JSON.stringify(out) + '\\n');
`;

function run(argv: string[], env: NodeJS.ProcessEnv = {}): { code: number; out: string; err: string } {
  const r = spawnSync(argv[0]!, argv.slice(1), { env: { ...process.env, ...env }, encoding: 'utf8' });
  return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
}

describe.skipIf(!canRunLab)(
  'port squatting after a crash: the kept chains reach only a Leash listener (root, lab)',
  () => {
    const lab = useLab('tcs');
    let dir = '';
    let env: NodeJS.ProcessEnv = {};
    let agent!: LabUser;
    let other!: LabUser;
    let svc: ChildProcess | null = null;
    let svcErr = '';
    const cfg = () => path.join(dir, 'leash.yaml');
    const asUser = (u: LabUser) => ['setpriv', `--reuid=${u.uid}`, `--regid=${u.gid}`, '--clear-groups'];

    const startSvc = async () => {
      svcErr = '';
      if (fs.existsSync(env.LEASH_PID_FILE!)) fs.rmSync(env.LEASH_PID_FILE!);
      const child = spawn(
        'ip',
        ['netns', 'exec', lab.get().agentNs, 'timeout', '-s', 'KILL', '600', process.execPath, CLI, '-c', cfg()],
        { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] },
      );
      lab.get().defer(`stop leash service pid ${child.pid}`, () => stopChild(child, 10_000));
      child.stderr!.setEncoding('utf8').on('data', (d: string) => (svcErr += d));
      svc = child;
      await waitForServiceReady(
        child,
        () => svcErr,
        () => fs.existsSync(env.LEASH_PID_FILE!),
      );
    };

    /** The agent's proxy and forwarder ports, as its kept nat chain redirects to them. */
    const agentPorts = () => {
      const r = run([
        'ip',
        'netns',
        'exec',
        lab.get().agentNs,
        'nft',
        'list',
        'chain',
        'ip',
        'leash',
        `agent_${agent.uid}`,
      ]);
      const tcp = /meta l4proto tcp redirect to :(\d+)/.exec(r.out);
      const dns = /udp dport 53 redirect to :(\d+)/.exec(r.out);
      if (!tcp || !dns) throw new Error(`no redirect in the agent's chain:\n${r.out}${r.err}`);
      return { tcp: Number(tcp[1]), dns: Number(dns[1]) };
    };

    /** Starts the squatter as `u`; resolves once it has bound, with a stop() that returns its counts. */
    const squat = async (u: LabUser, ports: { tcp: number; dns: number }) => {
      const child = spawn(
        'ip',
        ['netns', 'exec', lab.get().agentNs, ...asUser(u), process.execPath, path.join(dir, 'squatter.mjs')].concat([
          String(ports.tcp),
          String(ports.dns),
        ]),
        { stdio: ['pipe', 'pipe', 'pipe'] },
      );
      lab.get().defer(`stop squatter pid ${child.pid}`, () => stopChild(child, 2000));
      let out = '';
      child.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
      child.stderr!.setEncoding('utf8').on('data', (d: string) => (out += d));
      for (let i = 0; i < 200 && !out.includes('listening'); i++) await new Promise((r) => setTimeout(r, 50));
      expect(out).toMatch(/listening/);
      const bound = JSON.parse(/listening (.*)/.exec(out)![1]!) as string[];
      return {
        bound,
        stop: async () => {
          const exited = new Promise((r) => child.on('exit', r));
          child.stdin!.end();
          await exited;
          return JSON.parse(out.trim().split('\n').pop()!) as { accepted: number; bytes: number; datagrams: number };
        },
      };
    };

    /** The agent's attempts (ATTEMPTS) as the leashed account. */
    const attempts = (n: number) => {
      const otherLab = LAB.hosts.find((h) => h.name === 'other.lab')!.v4;
      const r = run([
        'ip',
        'netns',
        'exec',
        lab.get().agentNs,
        ...asUser(agent),
        'timeout',
        '60',
        process.execPath,
        path.join(dir, 'attempts.mjs'),
        otherLab,
        '80',
        LAB.dnsV4,
        String(n),
      ]);
      if (r.code !== 0) throw new Error(`attempts: ${r.out}${r.err}`);
      return JSON.parse(r.out.trim()) as { tcp: string[]; dns: string[] };
    };

    beforeAll(async () => {
      const l = lab.get();
      dir = fs.mkdtempSync(path.join(l.dir, 'tcs-'));
      fs.chmodSync(dir, 0o755);
      const mnt = path.join(dir, 'fs');
      fs.mkdirSync(mnt);
      const m = run(['mount', '-t', 'tmpfs', '-o', 'size=8m,mode=0755', 'leash-tcs', mnt]);
      if (m.code !== 0) throw new Error(m.err);
      l.defer(`umount ${mnt}`, () => run(['umount', '-l', mnt]));
      fs.writeFileSync(path.join(mnt, 'held'), 'x\n', { mode: 0o644 });
      fs.writeFileSync(path.join(dir, 'squatter.mjs'), SQUATTER, { mode: 0o644 });
      fs.writeFileSync(path.join(dir, 'attempts.mjs'), ATTEMPTS, { mode: 0o644 });
      agent = await l.createUser('leash-tcs1');
      other = await l.createUser('leash-tcs2');
      // Only the agent is a subject: the other account is any local user with no business receiving its traffic.
      fs.writeFileSync(
        path.join(dir, 'passwd'),
        `root:x:0:0:root:/root:/bin/bash\n${agent.name}:x:${agent.uid}:${agent.gid}::/nonexistent:/usr/sbin/nologin\n`,
      );
      fs.writeFileSync(
        cfg(),
        `user: null
fail_mode: closed
network: { mode: whitelist, allow: [good.lab, other.lab], deny: [], dns_resolvers: [${LAB.dnsV4}] }
filesystem: { mode: blacklist, allow: [], deny: [${mnt}/held] }
commands: { mode: blacklist, allow: [], deny: [] }
tools: { mode: whitelist, allow: [read_file], deny: [] }
logging: { level: info, decisions: ${path.join(dir, 'decisions.jsonl')} }
`,
      );
      env = {
        LEASH_STATE_DIR: path.join(dir, 'state'),
        LEASH_PASSWD: path.join(dir, 'passwd'),
        LEASH_TOOLS_SOCKET: path.join(dir, 'tools.sock'),
        LEASH_APPROVALS_SOCKET: path.join(dir, 'approvals.sock'),
        LEASH_PID_FILE: path.join(dir, 'leash.pid'),
        LEASH_WATCHER_TIMEOUT_S: '600',
      };
      await startSvc();
    }, 120_000);

    afterAll(async () => {
      if (svc && svc.exitCode === null && svc.signalCode === null) await stopChild(svc, 10_000);
    }, 30_000);

    it('while the service runs, the agent reaches an allowed host and its resolver through Leash', () => {
      const a = attempts(2);
      expect(a.tcp).toEqual(['page', 'page']);
      expect(a.dns).toEqual(['answered', 'answered']);
    }, 60_000);

    it('after SIGKILL, another account and then the agent bind its ports: nothing of the agent reaches them', async () => {
      const ports = agentPorts();
      process.kill(-svc!.pid!, 'SIGKILL');
      while (svc!.exitCode === null && svc!.signalCode === null) await new Promise((r) => setTimeout(r, 10));
      // The chains outlive the crash (as after ExecStopPost with SERVICE_RESULT=signal): the redirect is still there.
      expect(agentPorts()).toEqual(ports);
      for (const who of [other, agent]) {
        const s = await squat(who, ports);
        expect(s.bound, who.name).toEqual(['127.0.0.1 tcp', '::1 tcp', 'udp']);
        const a = attempts(3);
        const got = await s.stop();
        console.log(`squatter ${who.name}: ${JSON.stringify(got)}; agent saw ${JSON.stringify(a)}`);
        expect(got, who.name).toMatchObject({ accepted: 0, bytes: 0, datagrams: 0 });
        // The guard's reset answers the SYN (the client reads it as a refusal), never the squatter's page.
        for (const t of a.tcp) expect(['ECONNRESET', 'ECONNREFUSED'], who.name).toContain(t);
        expect(a.dns, who.name).toEqual(['silence', 'silence', 'silence']);
      }
    }, 90_000);

    it('the next start restores service on the same ports, from the last known good state first', async () => {
      await startSvc();
      const a = attempts(2);
      expect(a.tcp).toEqual(['page', 'page']);
      expect(a.dns).toEqual(['answered', 'answered']);
      // In force from the saved state before a profile was read, then the files' own pass, then ready.
      const at = ['"msg":"last known good applied"', '"msg":"subjects applied"', '"msg":"ready"'].map((m) =>
        svcErr.indexOf(m),
      );
      expect(at[0]).toBeGreaterThan(-1);
      expect(at).toEqual([...at].sort((x, y) => x - y));
      const saved = path.join(env.LEASH_STATE_DIR!, 'last-good', 'state.json');
      expect(fs.statSync(saved).mode & 0o777).toBe(0o600);
      expect(fs.statSync(path.dirname(saved)).mode & 0o777).toBe(0o700);
    }, 90_000);

    it('a saved state that allows more than the files is trusted only until the correcting pass', async () => {
      // other.lab leaves the floor while the service is down: the saved state still allows it.
      expect(await stopChild(svc!, 10_000)).toBe(0);
      const good = fs.readFileSync(cfg(), 'utf8');
      fs.writeFileSync(cfg(), good.replace('allow: [good.lab, other.lab]', 'allow: [good.lab]'));
      try {
        await startSvc();
        expect(svcErr).toContain('"msg":"last known good applied"');
        expect(svcErr).toMatch(/"reapply":1[^\n]*"msg":"subjects applied"/);
        const a = attempts(2);
        expect(a.tcp.filter((t) => t === 'page')).toEqual([]);
      } finally {
        fs.writeFileSync(cfg(), good);
      }
    }, 90_000);

    it('a corrupt saved state is ignored with a line naming it; the start is as without one', async () => {
      expect(await stopChild(svc!, 10_000)).toBe(0);
      const saved = path.join(env.LEASH_STATE_DIR!, 'last-good', 'state.json');
      fs.writeFileSync(saved, '{"version": 1, "subjects": [');
      await startSvc();
      expect(svcErr).toMatch(/last known good state ignored, starting without: [^\n]*not JSON/);
      expect(svcErr).not.toContain('"msg":"last known good applied"');
      const a = attempts(2);
      expect(a.tcp).toEqual(['page', 'page']);
    }, 90_000);
  },
);
