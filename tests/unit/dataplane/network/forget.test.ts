import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createForgetter } from '../../../../src/dataplane/network/proxy/forget.js';
import { loadNative } from '../../../../src/native.js';

/** A connected loopback pair: [the client's socket, the server's]. */
async function pair(): Promise<{ client: net.Socket; server: net.Socket; close: () => void }> {
  const srv = net.createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as net.AddressInfo).port;
  const accepted = new Promise<net.Socket>((r) => srv.once('connection', r));
  const client = net.connect(port, '127.0.0.1');
  await new Promise<void>((r, j) => client.once('connect', r).once('error', j));
  const server = await accepted;
  server.on('error', () => {});
  client.on('error', () => {});
  return { client, server, close: () => (client.destroy(), server.destroy(), srv.close()) };
}

/** The nested netlink attributes of a ctnetlink message after its nfgenmsg: type -> payload. */
function attrs(b: Buffer, from: number, to: number): Map<number, Buffer> {
  const m = new Map<number, Buffer>();
  for (let at = from; at + 4 <= to;) {
    const len = b.readUInt16LE(at);
    const type = b.readUInt16LE(at + 2) & 0x3fff;
    m.set(type, b.subarray(at + 4, at + len));
    at += (len + 3) & ~3;
  }
  return m;
}

const closers: (() => void)[] = [];
afterEach(() => closers.splice(0).forEach((c) => c()));

describe('forgetting a reset connection', () => {
  it('resets the socket, then deletes by the tuple of its packets; "no such entry" is not an error', async () => {
    const p = await pair();
    closers.push(p.close);
    const sent: Buffer[] = [];
    const errors: { err: Error; stage: string }[] = [];
    const answers: (0 | string)[] = [0, 'ENOENT', 'EPERM'];
    const native = {
      conntrackRequest: (fd: number, dir: 'orig' | 'reply') => Buffer.from(`${fd}:${dir}`),
      conntrackDelete: (b: Buffer) => (sent.push(b), answers.shift() ?? 0),
    };
    const f = createForgetter((err, ctx) => errors.push({ err, stage: ctx.stage }), native);
    const closed = new Promise<Error | undefined>((r) => p.server.once('close', () => r(undefined)));
    const reset = new Promise<string | undefined>((r) =>
      p.server.once('error', (e: NodeJS.ErrnoException) => r(e.code)),
    );
    f.reset(p.client, 'orig', 1001);
    expect(p.client.destroyed).toBe(true);
    expect(await reset).toBe('ECONNRESET'); // a reset, not a FIN
    await closed;
    expect(sent.map(String)).toEqual([expect.stringMatching(/^\d+:orig$/)]);
    expect(f.stats).toEqual({ deleted: 1, failed: 0 });

    const q = await pair();
    closers.push(q.close);
    f.reset(q.server, 'reply', 1001); // ENOENT: ignored
    const r = await pair();
    closers.push(r.close);
    f.reset(r.server, 'reply', 1002); // EPERM: reported
    expect(f.stats).toEqual({ deleted: 1, failed: 1 });
    expect(errors).toHaveLength(1);
    expect(errors[0]!.stage).toBe('conntrack');
    expect(errors[0]!.err.message).toBe('conntrack delete: EPERM');
  });

  it('a socket still connecting or already destroyed is reset without a delete', async () => {
    let asked = 0;
    const native = {
      conntrackRequest: () => (asked++, Buffer.alloc(20)),
      conntrackDelete: () => 0 as const,
    };
    const f = createForgetter(() => {}, native);
    const s = net.connect(9, '127.0.0.1'); // still connecting: Node resets it once connected
    s.on('error', () => {});
    f.reset(s, 'orig', 1);
    const p = await pair();
    closers.push(p.close);
    p.client.destroy();
    f.reset(p.client, 'orig', 1);
    await new Promise((r) => setImmediate(r));
    expect(s.destroyed).toBe(true);
    expect(asked).toBe(0);
    expect(f.stats).toEqual({ deleted: 0, failed: 0 });
  });

  it('the native request names the entry by the tuple the socket sends (orig or reply), TCP, as a DELETE', async () => {
    const p = await pair();
    closers.push(p.close);
    const addon = loadNative();
    const fd = (p.client as unknown as { _handle: { fd: number } })._handle.fd;
    const b = addon.conntrackRequest(fd, 'orig');
    expect(b.readUInt32LE(0)).toBe(b.length); // nlmsg_len
    expect(b.readUInt16LE(4)).toBe((1 << 8) | 2); // NFNL_SUBSYS_CTNETLINK, IPCTNL_MSG_CT_DELETE
    expect(b.readUInt16LE(6) & 0x5).toBe(0x5); // NLM_F_REQUEST | NLM_F_ACK
    expect(b[16]).toBe(2); // nfgen_family AF_INET
    const top = attrs(b, 20, b.length);
    expect([...top.keys()]).toEqual([1]); // CTA_TUPLE_ORIG
    const tuple = top.get(1)!;
    const parts = attrs(tuple, 0, tuple.length);
    const ip = attrs(parts.get(1)!, 0, parts.get(1)!.length); // CTA_TUPLE_IP
    const proto = attrs(parts.get(2)!, 0, parts.get(2)!.length); // CTA_TUPLE_PROTO
    expect([...ip.get(1)!]).toEqual([127, 0, 0, 1]); // CTA_IP_V4_SRC
    expect([...ip.get(2)!]).toEqual([127, 0, 0, 1]); // CTA_IP_V4_DST
    expect(proto.get(1)![0]).toBe(6); // CTA_PROTO_NUM TCP
    expect(proto.get(2)!.readUInt16BE(0)).toBe(p.client.localPort); // CTA_PROTO_SRC_PORT
    expect(proto.get(3)!.readUInt16BE(0)).toBe(p.client.remotePort); // CTA_PROTO_DST_PORT

    const sfd = (p.server as unknown as { _handle: { fd: number } })._handle.fd;
    const r = addon.conntrackRequest(sfd, 'reply');
    const rt = attrs(r, 20, r.length);
    expect([...rt.keys()]).toEqual([2]); // CTA_TUPLE_REPLY
    const rp = attrs(rt.get(2)!, 0, rt.get(2)!.length);
    const rproto = attrs(rp.get(2)!, 0, rp.get(2)!.length);
    expect(rproto.get(2)!.readUInt16BE(0)).toBe(p.server.localPort);
    expect(rproto.get(3)!.readUInt16BE(0)).toBe(p.server.remotePort);
    expect(() => addon.conntrackRequest(fd, 'both' as 'orig')).toThrow(/conntrackRequest/);
  });
});
