/**
 * A real systemd-journald of the test's own: started in a private mount namespace with tmpfs over
 * /run and (when it exists) /var/log/journal, so it touches nothing of the host's
 * and everything it wrote is gone with it. The test reaches its socket and its files through
 * /proc/<pid>/root (Leash gets LEASH_JOURNAL_SOCKET; journalctl gets -D).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';

export const JOURNALD = ['/usr/lib/systemd/systemd-journald', '/lib/systemd/systemd-journald'].find((p) =>
  fs.existsSync(p),
);
export const hasJournalctl = spawnSync('journalctl', ['--version']).status === 0;

export interface TestJournald {
  pid: number;
  /** journald's native socket, as seen from outside its namespace. */
  socket: string;
  /** Entries matching journalctl's field matches (e.g. `LEASH_UID=1001`), as JSON objects. */
  query(matches: string[]): Array<Record<string, string>>;
  stop(): Promise<void>;
}

export async function startJournald(): Promise<TestJournald> {
  if (JOURNALD === undefined)
    throw new Error('systemd-journald is not installed (scripts/install-deps.sh installs systemd)');
  const script = [
    'set -e',
    // All of /run, in this namespace only: a host without systemd as PID 1 may have no /run/systemd to mount
    // over, and nothing may be made on the host's own /run.
    'mount -t tmpfs -o mode=0755 leash-test /run',
    'mkdir -p /run/systemd /run/log/journal',
    'if [ -d /var/log/journal ]; then mount -t tmpfs -o mode=0755 leash-test /var/log/journal; fi',
    `exec ${JOURNALD}`,
  ].join('\n');
  const c: ChildProcess = spawn('unshare', ['-m', '--propagation', 'private', 'sh', '-c', script], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  c.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  const pid = c.pid!;
  const root = `/proc/${pid}/root`;
  const socket = `${root}/run/systemd/journal/socket`;
  const stop = async () => {
    if (c.exitCode !== null || c.signalCode !== null) return;
    const gone = new Promise<void>((r) => c.once('exit', () => r()));
    c.kill('SIGTERM');
    const t = setTimeout(() => c.kill('SIGKILL'), 5000);
    await gone;
    clearTimeout(t);
  };
  const deadline = Date.now() + 10_000;
  while (!fs.existsSync(socket)) {
    if (c.exitCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(`systemd-journald did not start: ${err}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    pid,
    socket,
    query(matches) {
      const r = spawnSync('journalctl', ['-D', `${root}/run/log/journal`, '-o', 'json', '--no-pager', ...matches], {
        encoding: 'utf8',
      });
      // journalctl exits 1 with "-- No entries --" on stderr in some versions when nothing matched.
      return r.stdout
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, string>);
    },
    stop,
  };
}
