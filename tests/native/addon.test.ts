import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadNative, nativeAvailable, type NativeError } from '../../src/native.js';

const d = nativeAvailable() ? describe : describe.skip;

function fdOf(sock: net.Socket): number {
  return (sock as unknown as { _handle: { fd: number } })._handle.fd;
}

d('native addon', () => {
  const cleanups: (() => void)[] = [];
  afterEach(() => {
    while (cleanups.length) cleanups.pop()!();
  });

  it('sdNotify is a no-op without NOTIFY_SOCKET', () => {
    const saved = process.env.NOTIFY_SOCKET;
    delete process.env.NOTIFY_SOCKET;
    try {
      expect(loadNative().sdNotify('READY=1')).toBe(false);
    } finally {
      if (saved !== undefined) process.env.NOTIFY_SOCKET = saved;
    }
  });

  it('sdNotify sends the state as one datagram to a fake notify socket', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-notify-'));
    cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
    const sockPath = path.join(dir, 'notify.sock');
    // Node's dgram has no AF_UNIX: a tiny python receiver stands in for systemd.
    const py = `import socket,sys\ns=socket.socket(socket.AF_UNIX,socket.SOCK_DGRAM)\ns.bind(${JSON.stringify(sockPath)})\nprint('bound',flush=True)\nfor _ in range(2):\n  sys.stdout.write(s.recv(4096).decode()+'\\0');sys.stdout.flush()\n`;
    const { spawn } = await import('node:child_process');
    const child = spawn('python3', ['-c', py], { stdio: ['ignore', 'pipe', 'inherit'] });
    cleanups.push(() => child.kill('SIGKILL'));
    let out = '';
    await new Promise<void>((resolve) => {
      child.stdout.on('data', (b: Buffer) => {
        out += b.toString();
        if (out.startsWith('bound\n')) resolve();
      });
    });
    const saved = process.env.NOTIFY_SOCKET;
    process.env.NOTIFY_SOCKET = sockPath;
    try {
      expect(loadNative().sdNotify('READY=1\nSTATUS=ok')).toBe(true);
      expect(loadNative().sdNotify('WATCHDOG=1')).toBe(true);
    } finally {
      if (saved === undefined) delete process.env.NOTIFY_SOCKET;
      else process.env.NOTIFY_SOCKET = saved;
    }
    await new Promise<void>((resolve) => child.on('exit', () => resolve()));
    const msgs = out.slice('bound\n'.length).split('\0').filter(Boolean);
    expect(msgs).toEqual(['READY=1\nSTATUS=ok', 'WATCHDOG=1']);
  });

  it('sdNotify reports a dead socket as an errno error', () => {
    const saved = process.env.NOTIFY_SOCKET;
    process.env.NOTIFY_SOCKET = path.join(os.tmpdir(), `leash-absent-${process.pid}.sock`);
    try {
      let err: NativeError | undefined;
      try {
        loadNative().sdNotify('READY=1');
      } catch (e) {
        err = e as NativeError;
      }
      expect(err?.code).toBe('ENOENT');
      expect(err?.syscall).toBe('sendto');
    } finally {
      if (saved === undefined) delete process.env.NOTIFY_SOCKET;
      else process.env.NOTIFY_SOCKET = saved;
    }
  });

  it('peerCred names the process on the other end of a unix socket', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-peer-'));
    cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
    const sockPath = path.join(dir, 's.sock');
    const server = net.createServer();
    cleanups.push(() => server.close());
    const got = new Promise<{ pid: number; uid: number; gid: number }>((resolve) => {
      server.on('connection', (s) => {
        resolve(loadNative().peerCred(fdOf(s)));
        s.destroy();
      });
    });
    await new Promise<void>((r) => server.listen(sockPath, r));
    const c = net.connect(sockPath);
    cleanups.push(() => c.destroy());
    const cred = await got;
    expect(cred).toEqual({ pid: process.pid, uid: process.getuid!(), gid: process.getgid!() });
  });

  it('errors carry errno name and syscall', () => {
    let err: NativeError | undefined;
    try {
      loadNative().peerCred(987654);
    } catch (e) {
      err = e as NativeError;
    }
    expect(err?.code).toBe('EBADF');
    expect(err?.syscall).toBe('getsockopt');
  });

  it('originalDst on a connection that was not redirected is ENOENT', async () => {
    const server = net.createServer();
    cleanups.push(() => server.close());
    const got = new Promise<NativeError>((resolve) => {
      server.on('connection', (s) => {
        try {
          loadNative().originalDst(fdOf(s));
        } catch (e) {
          resolve(e as NativeError);
        }
        s.destroy();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const c = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1');
    c.on('error', () => {});
    cleanups.push(() => c.destroy());
    const err = await got;
    // With conntrack loaded and no NAT the kernel answers ENOENT; without nf_conntrack it is ENOPROTOOPT.
    expect(['ENOENT', 'ENOPROTOOPT']).toContain(err.code);
    expect(err.syscall).toBe('getsockopt');
  });

  it('validates its arguments with a usage TypeError', () => {
    const n = loadNative() as unknown as Record<string, (x?: unknown) => unknown>;
    expect(() => n.originalDst!('x')).toThrow(TypeError);
    expect(() => n.peerCred!()).toThrow(/peerCred\(fd: number\)/);
    expect(() => n.sdNotify!(1)).toThrow(TypeError);
  });
});
