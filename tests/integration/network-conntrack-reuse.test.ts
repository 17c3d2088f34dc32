import { beforeAll, describe, expect, it } from 'vitest';
import type { DecisionRecord } from '../../src/log/decisions.js';
import { canRunLab, netPolicy, useLab, type EnforcerHandle, type LabUser } from '../lab/index.js';

// A connection ended by a reset leaves its conntrack entry for 10 s, and a SYN with the same addresses and ports
// joins that entry (and its translation, or lack of one) instead of going through the nat chain. Both sides of that
// are tried here, each with the source port chosen on purpose: the subject reusing the port of another account's
// connection (which was never redirected), and the proxy's own upstream connection reusing the port of a subject's
// connection it refused (which was redirected to the subject's listener).

/** A lab service upstream that answers `svc:9444` and then resets the connection (the far side's reset). */
const RST = 9444;

describe.skipIf(!canRunLab)('conntrack entries left by a reset (root, lab)', () => {
  const L = useLab('ctr');
  let agent: LabUser;
  let enf: EnforcerHandle;
  const linesFor = (uid: number): DecisionRecord[] => enf.decisions().filter((d) => d.uid === uid);

  beforeAll(async () => {
    const lab = L.get();
    agent = await lab.createUser('leash-tct1');
    await lab.serve('upstream', [
      { host: '198.18.1.20', port: RST, reset: true },
      { host: '2001:db8:1::20', port: RST, reset: true },
    ]);
    enf = await lab.startEnforcer({
      peekTimeoutMs: 500,
      subjects: [
        {
          uid: agent.uid,
          port: 18001,
          policy: netPolicy({ mode: 'whitelist', allow: ['good.lab'], deny: ['evil.lab'] }),
        },
      ],
    });
  }, 60_000);

  it('the subject cannot reach a destination directly by reusing the port of another account’s reset connection', async () => {
    for (const [host, localPort] of [
      ['198.18.1.20', 47001],
      ['2001:db8:1::20', 47002],
    ] as const) {
      // Root (any other account) talks to the server, which resets the connection: the entry stays, untranslated.
      const [root] = await L.get().probe(null, [{ kind: 'tcp', host, port: RST, send: 'x', localPort }]);
      expect(root!.data, `${host}: ${JSON.stringify(root)}`).toBe(`svc:${RST}\n`);
      const before = linesFor(agent.uid).length;
      // The subject, from the same source port to the same destination, within those 10 s. Joining root's entry
      // would send its SYN straight out to the server (its `svc` answer, no decision). Its chain drops it instead
      // (after nat, TCP may leave only for its own listener): nothing comes back until the entry has expired.
      const [mine] = await L.get().probe(agent, [{ kind: 'tcp', host, port: RST, send: 'x', localPort }]);
      expect(mine, host).toMatchObject({ ok: false, data: '' });
      expect(['ETIMEDOUT', 'ECONNRESET'], `${host}: ${mine!.code}`).toContain(mine!.code);
      // Once through the proxy (a retransmitted SYN after the entry expired) it is judged like any connection.
      for (const d of linesFor(agent.uid).slice(before))
        expect(d).toMatchObject({ action: 'block', subject: expect.objectContaining({ port: RST }) });
    }
  }, 60_000);

  it('a connection the proxy reset leaves no redirect behind for the next connection on its port', async () => {
    for (const [host, localPort] of [
      ['198.18.1.20', 47011],
      ['2001:db8:1::20', 47012],
    ] as const) {
      const before = linesFor(agent.uid).length;
      const [refused] = await L.get().probe(agent, [
        { kind: 'tls', host, port: 443, servername: 'evil.lab', localPort },
      ]);
      expect(refused, host).toMatchObject({ ok: false, code: 'ECONNRESET' });
      expect(linesFor(agent.uid).slice(before)).toEqual([
        expect.objectContaining({ action: 'block', reason: 'deny_entry', rule: 'evil.lab' }),
      ]);
      // What the proxy's upstream connection meets when the kernel gives it that port: root, from the same port to
      // the same destination. With the subject's entry left, it joined the redirect and came back to the subject's
      // listener (judged as the subject: a reset and a second deny line). It reaches the server.
      const [root] = await L.get().probe(null, [{ kind: 'tls', host, port: 443, servername: 'evil.lab', localPort }]);
      expect(root, `${host}: ${JSON.stringify(root)}`).toMatchObject({ ok: true, code: null });
      expect(root!.data).toContain(`"local":"${host}"`);
      expect(linesFor(agent.uid).slice(before)).toHaveLength(1);
    }
  }, 60_000);
});
