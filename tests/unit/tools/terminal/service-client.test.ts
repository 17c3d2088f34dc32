import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it, onTestFinished } from 'vitest';
import { fetchServicePolicy, servicePolicySource } from '../../../../src/tools/terminal/service-client.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-term-svc-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
let n = 0;

/** A fake service: records each request line and answers with `reply` (or nothing). */
async function fakeService(reply: string | null): Promise<{ sock: string; requests: string[] }> {
  const sock = path.join(dir, `s${n++}.sock`);
  const requests: string[] = [];
  const server = net.createServer((c) => {
    c.setEncoding('utf8');
    c.on('data', (d: string) => {
      requests.push(d);
      if (reply !== null) c.write(reply.replace('{', '{"seq":1,') + '\n');
    });
  });
  await new Promise<void>((r) => server.listen(sock, r));
  onTestFinished(() => new Promise<void>((r) => server.close(() => r())));
  return { sock, requests };
}

const policy = { fail_mode: 'closed', commands: { mode: 'whitelist', allow: ['ls'], deny: [], args: {} } };

describe('policy from the service', () => {
  it('sends one request naming no user and validates the reply', async () => {
    const svc = await fakeService(JSON.stringify({ ok: true, uid: 1001, policy }));
    expect(await fetchServicePolicy(svc.sock)).toEqual(policy);
    expect(svc.requests.map((r) => JSON.parse(r))).toEqual([{ seq: 1, op: 'commands_policy' }]);
  });

  it('returns null for no_policy (the caller fails closed)', async () => {
    const svc = await fakeService(JSON.stringify({ ok: false, error: 'no_policy' }));
    expect(await fetchServicePolicy(svc.sock)).toBeNull();
  });

  it.each([
    ['a refusal', JSON.stringify({ ok: false, error: 'forbidden' })],
    ['garbage', '{not json'],
    ['a duplicate key', JSON.stringify({ ok: true, policy }).replace('{"ok":true', '{"ok":false,"ok":true')],
    ['an invalid policy', JSON.stringify({ ok: true, policy: { commands: { mode: 'x' } } })],
  ])('rejects %s', async (_what, reply) => {
    const svc = await fakeService(reply);
    await expect(fetchServicePolicy(svc.sock)).rejects.toThrow();
  });

  it('rejects a silent service after its timeout and a missing socket at once', async () => {
    const svc = await fakeService(null);
    await expect(fetchServicePolicy(svc.sock, 200)).rejects.toThrow(/no reply/);
    await expect(fetchServicePolicy(path.join(dir, 'absent.sock'))).rejects.toThrow(/ENOENT/);
  });

  it('as a per-call source, turns any failure into no policy', async () => {
    const warnings: string[] = [];
    const src = servicePolicySource(path.join(dir, 'absent.sock'), (m) => warnings.push(m));
    expect(await src()).toBeNull();
    expect(warnings).toHaveLength(1);
  });
});

describe('policy from the tools socket server (src/tools/remote/socket.ts)', () => {
  it('answers commands_policy for the UID SO_PEERCRED names, and no_policy for others', async () => {
    const { nativeAvailable } = await import('../../../../src/native.js');
    if (!nativeAvailable()) return; // SO_PEERCRED needs the addon (tests/native covers its absence)
    const { createToolsSocketServer } = await import('../../../../src/tools/remote/socket.js');
    const asked: number[] = [];
    const make = async (policyUid: number) => {
      const sock = path.join(dir, `tools${n++}.sock`);
      const srv = await createToolsSocketServer({
        path: sock,
        policyForUid: () => null,
        log: { write: () => 'ref' },
        commandsPolicyForUid: (uid) => {
          asked.push(uid);
          return uid === policyUid ? policy : null;
        },
      });
      onTestFinished(() => srv.close());
      return sock;
    };
    const me = process.getuid!();
    expect(await fetchServicePolicy(await make(me))).toEqual(policy);
    expect(await fetchServicePolicy(await make(me + 1))).toBeNull();
    expect(asked).toEqual([me, me]);
  });

  it('rejects when the service does not offer commands_policy (it closes the connection)', async () => {
    const { createToolsSocketServer } = await import('../../../../src/tools/remote/socket.js');
    const sock = path.join(dir, `tools${n++}.sock`);
    const srv = await createToolsSocketServer({
      path: sock,
      policyForUid: () => null,
      log: { write: () => 'ref' },
      peerUid: () => 4242,
    });
    onTestFinished(() => srv.close());
    await expect(fetchServicePolicy(sock)).rejects.toThrow(/closed without a reply/);
  });
});
