import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/**
 * Debian 12 booted with systemd as PID 1 in systemd-nspawn, on a copy of the cached image (tests/systemd/image.sh),
 * because a real systemd on these machines needs: the image's own ext4 (fanotify marks made inside never
 * reach the host's filesystems), a network namespace of its own (nft rules stay in it), nspawn's seccomp list
 * widened by the fanotify calls, --keep-unit (PID 1 here is not systemd), a tmpfs on /run/systemd/nspawn.
 */
export interface Container {
  /** The copy's root, mounted on the host. */
  root: string;
  /** The container's PID 1, as the host sees it. */
  pid: number;
  /** ms from nspawn's start to `systemctl is-system-running --wait` returning. */
  bootMs: number;
  exec(cmd: string[], opts?: { input?: string; timeoutMs?: number }): { code: number | null; out: string; err: string };
  /**
   * Writes a file inside, as the container's root. Once Leash runs in there, an open from the host is denied: the
   * watcher sees a process outside its PID namespace as pid 0 and answers it closed.
   */
  put(file: string, content: string): void;
  get(file: string): string;
  /** A command in the background (the agent's loop): resolves with its stdout when it exits. */
  spawn(cmd: string[]): { child: ChildProcess; done: Promise<{ code: number | null; out: string; err: string }> };
  /** Powers off and boots the same root again (the boot test). */
  reboot(): Promise<void>;
  close(): Promise<void>;
}

const PATH = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function sh(cmd: string[], timeout = 120_000) {
  const r = spawnSync(cmd[0]!, cmd.slice(1), { encoding: 'utf8', timeout });
  return { code: r.status, out: r.stdout ?? '', err: (r.stderr ?? '') + (r.error ? String(r.error) : '') };
}

function mustSh(cmd: string[], timeout?: number): string {
  const r = sh(cmd, timeout);
  if (r.code !== 0) throw new Error(`${cmd.join(' ')}: exit ${r.code}: ${r.err}`);
  return r.out;
}

/** The start time of a process (clock ticks since boot), null when it is gone or a zombie: with its PID, an identity. */
function startTime(pid: number): string | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return f[0] === 'Z' ? null : f[19]!;
  } catch {
    return null;
  }
}

function childPid(parent: number): number | null {
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === parent) return Number(d);
    } catch {
      /* gone */
    }
  }
  return null;
}

/** Copies the cached image and boots the copy; every step is undone by close(), also after a failed start. */
export async function bootContainer(opts: {
  image: string;
  prefix: string;
  log: (s: string) => void;
}): Promise<Container> {
  const work = fs.mkdtempSync(`/var/tmp/${opts.prefix}-run.`);
  const img = path.join(work, 'root.img');
  const root = path.join(work, 'root');
  const nspawnDir = '/run/systemd/nspawn';
  const machine = `${opts.prefix}-${process.pid}`;
  let mountedRoot = false;
  let mountedNspawn = false;
  let nspawn: ChildProcess | null = null;
  let pid = 0;
  let initStart: string | null = null;
  const consoleLog = path.join(work, 'console.log');

  // The commands run in the background (nsenter, outside the container's PID namespace): a shutdown waits for them.
  const children = new Set<ChildProcess>();
  const stopNspawn = async () => {
    for (const ch of children) ch.kill('SIGKILL');
    const init = pid;
    const alive = () => init !== 0 && startTime(init) === initStart;
    if (nspawn && nspawn.exitCode === null && nspawn.signalCode === null) {
      const exited = new Promise((r) => nspawn!.once('exit', r));
      // SIGTERM makes nspawn power the container off (systemd's clean shutdown).
      nspawn.kill('SIGTERM');
      await Promise.race([exited, sleep(60_000)]);
    }
    // A shutdown that hung, or an nspawn that died: SIGKILL of the container's init ends its whole PID namespace.
    if (alive()) {
      opts.log(`container init ${init} still running: SIGKILL`);
      process.kill(init, 'SIGKILL');
      for (let i = 0; i < 100 && alive(); i++) await sleep(100);
    }
    if (nspawn && nspawn.exitCode === null && nspawn.signalCode === null) nspawn.kill('SIGKILL');
  };

  const boot = async () => {
    const t0 = Date.now();
    const out = fs.openSync(consoleLog, 'a');
    nspawn = spawn(
      'setsid',
      [
        'systemd-nspawn',
        '-b',
        '-D',
        root,
        `--machine=${machine}`,
        '--register=no',
        '--keep-unit',
        '--private-network',
        '--capability=all',
        '--resolv-conf=off',
        '--timezone=off',
        '--link-journal=no',
        '--console=read-only',
        '--system-call-filter=fanotify_init fanotify_mark open_by_handle_at pidfd_getfd process_mrelease',
      ],
      // Not detached: setsid forks when its caller already leads a group, and nspawn would outlive its handle here.
      { stdio: ['ignore', out, out] },
    );
    fs.closeSync(out);
    // setsid execs nspawn in place (a session of its own: a group to kill): nspawn's child is the container's init.
    for (let i = 0; i < 300 && !pid; i++) {
      await sleep(100);
      if (nspawn.exitCode !== null) break;
      const c = childPid(nspawn.pid!);
      if (c && fs.readlinkSync(`/proc/${c}/exe`).endsWith('systemd')) {
        pid = c;
        initStart = startTime(c);
      }
    }
    if (!pid) throw new Error(`the container did not start: ${fs.readFileSync(consoleLog, 'utf8').slice(-2000)}`);
    // systemctl answers once PID 1 has its bus socket; until then it fails at once.
    let r = execIn(['true']);
    for (let i = 0; i < 240; i++) {
      r = execIn(['systemctl', 'is-system-running', '--wait'], { timeoutMs: 120_000 });
      if (/running|degraded/.test(r.out)) break;
      await sleep(500);
    }
    if (!/running|degraded/.test(r.out)) throw new Error(`boot: ${r.out} ${r.err}`);
    return Date.now() - t0;
  };

  const execIn: Container['exec'] = (cmd, o = {}) => {
    const r = spawnSync('nsenter', ['-t', String(pid), '-a', '--', 'env', '-i', PATH, ...cmd], {
      encoding: 'utf8',
      input: o.input,
      timeout: o.timeoutMs ?? 120_000,
      // A journal full of decisions is more than spawnSync's default 1 MiB.
      maxBuffer: 256 * 1024 * 1024,
    });
    return { code: r.status, out: r.stdout ?? '', err: (r.stderr ?? '') + (r.error ? String(r.error) : '') };
  };

  const close = async () => {
    await stopNspawn();
    if (mountedRoot) {
      // The loop device goes with the last unmount (mount -o loop sets autoclear).
      const r = sh(['umount', root]);
      if (r.code !== 0) opts.log(`umount ${root}: ${r.err}`);
      else mountedRoot = false;
    }
    if (mountedNspawn) {
      const r = sh(['umount', nspawnDir]);
      if (r.code === 0) mountedNspawn = false;
      else opts.log(`umount ${nspawnDir}: ${r.err} (another nspawn may be using it)`);
    }
    if (!mountedRoot) fs.rmSync(work, { recursive: true, force: true });
  };

  try {
    // A sparse copy: the cache never sees what a run does.
    mustSh(['cp', '--sparse=always', opts.image, img]);
    fs.mkdirSync(root);
    mustSh(['mount', '-o', 'loop', img, root]);
    mountedRoot = true;
    fs.mkdirSync(nspawnDir, { recursive: true });
    if (sh(['mountpoint', '-q', nspawnDir]).code !== 0) {
      mustSh(['mount', '-t', 'tmpfs', '-o', 'mode=0755', `${opts.prefix}-nspawn`, nspawnDir]);
      mountedNspawn = true;
    }
    const bootMs = await boot();
    const c: Container = {
      root,
      get pid() {
        return pid;
      },
      bootMs,
      exec: execIn,
      put(file, content) {
        const r = execIn(['sh', '-c', 'cat > "$1"', 'sh', file], { input: content });
        if (r.code !== 0) throw new Error(`put ${file}: ${r.err}`);
      },
      get(file) {
        const r = execIn(['cat', file]);
        if (r.code !== 0) throw new Error(`get ${file}: ${r.err}`);
        return r.out;
      },
      spawn(cmd) {
        const child = spawn('nsenter', ['-t', String(pid), '-a', '--', 'env', '-i', PATH, ...cmd], {
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        children.add(child);
        child.on('exit', () => children.delete(child));
        let out = '';
        let err = '';
        child.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
        child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
        const done = new Promise<{ code: number | null; out: string; err: string }>((resolve) =>
          child.on('close', (code) => resolve({ code, out, err })),
        );
        return { child, done };
      },
      async reboot() {
        await stopNspawn();
        pid = 0;
        c.bootMs = await boot();
      },
      close,
    };
    return c;
  } catch (e) {
    await close();
    throw e;
  }
}
